"""Remote engines the user added: a name, an OpenAI-compatible base URL and the chosen model, kept
as JSON in the data dir. Their API keys live in the OS keyring (service "specee-chat", one entry
per endpoint name), never in that file; where no keyring exists (a headless Linux box) a key is
kept for this process only, and SPECEE_API_KEY gives one from outside."""

from __future__ import annotations

import json
import re
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import keyring
import keyring.errors

from engine import knobs
from engine.atomic import write_text_atomic
from engine.paths import data_dir

KEYRING_SERVICE = "specee-chat"
API_KEY_ENV = knobs.API_KEY.name
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
# what users paste after the API root; the root itself ends in a version segment (/v1)
_ENDPOINT_SUFFIXES = ("/chat/completions", "/completions", "/models")
_VERSION_RE = re.compile(r"/v\d+(beta\d*|alpha\d*)?$")


class EndpointError(ValueError):
    """An endpoint that cannot be added or found; the message says what to change."""


@dataclass
class Endpoint:
    name: str
    base_url: str  # normalised: scheme://host[:port]/path ending in the API version, e.g. http://127.0.0.1:8080/v1
    model: str = ""  # the chosen model id ("" = the first one the server lists)
    added: float = 0.0

    def url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"


def normalise_base_url(url: str) -> str:
    """http(s)://host[:port][/path], with the version segment the OpenAI API lives under: a bare
    server address gets /v1 (llama-server, vLLM, `specee serve`), an address with /v1 (or /v1beta)
    keeps it, and a pasted .../chat/completions or .../models is cut back to its root."""
    text = url.strip()
    parts = urlsplit(text)
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise EndpointError(f"'{url}' is not an http:// or https:// address (for example http://127.0.0.1:8080)")
    if parts.query or parts.fragment:
        raise EndpointError(f"'{url}' has a query or fragment; give only the server's address (for example http://host:8080/v1)")
    try:
        parts.port  # noqa: B018 (raises on a bad port)
    except ValueError as exc:
        raise EndpointError(f"'{url}' has a bad port ({exc})") from None
    path = re.sub(r"/+", "/", parts.path).rstrip("/")
    for suffix in _ENDPOINT_SUFFIXES:
        if path.endswith(suffix):
            path = path[: -len(suffix)]
            break
    if not _VERSION_RE.search(path):
        path += "/v1"
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), path, "", ""))


def check_name(name: str) -> str:
    if not NAME_RE.fullmatch(name):
        raise EndpointError(
            f"'{name}' cannot name an endpoint: use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit"
        )
    return name


class EndpointRegistry:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or data_dir() / "endpoints.json"

    def all(self) -> list[Endpoint]:
        try:
            raw = json.loads(self.path.read_text(encoding="utf-8"))
            return [Endpoint(**entry) for entry in raw.get("endpoints", [])]
        except FileNotFoundError:
            return []
        except (json.JSONDecodeError, TypeError, AttributeError, UnicodeDecodeError):
            # A damaged file must not lock the user out: it is kept aside, and endpoints can be added again.
            broken = self.path.with_suffix(f".broken-{int(time.time())}.json")
            self.path.replace(broken)
            return []

    def get(self, name: str) -> Endpoint:
        found = next((e for e in self.all() if e.name == name), None)
        if found is None:
            known = ", ".join(e.name for e in self.all()) or "none yet"
            raise EndpointError(f"no endpoint named '{name}' (added: {known}); add it with: specee endpoints add {name} URL")
        return found

    def add(self, endpoint: Endpoint) -> Endpoint:
        """Add or replace (by name); the URL is validated and normalised."""
        endpoint = Endpoint(check_name(endpoint.name), normalise_base_url(endpoint.base_url), endpoint.model.strip())
        endpoint.added = time.time()
        self._write([e for e in self.all() if e.name != endpoint.name] + [endpoint])
        return endpoint

    def remove(self, name: str) -> None:
        self.get(name)
        self._write([e for e in self.all() if e.name != name])
        forget_api_key(name)

    def _write(self, endpoints: list[Endpoint]) -> None:
        write_text_atomic(self.path, json.dumps({"endpoints": [asdict(e) for e in endpoints]}, indent=1))


# -- API keys ---------------------------------------------------------------------------------------

# Keys given while no keyring works: this process only, never on disk.
_process_keys: dict[str, str] = {}


NO_KEYRING = "no OS keyring is available here (on Linux: a Secret Service such as GNOME Keyring or KWallet, over D-Bus)"


def store_api_key(name: str, key: str) -> str:
    """Save the key in the OS keyring. Returns '' or why it could not be saved: the key is then kept
    for this process only (the caller says so; SPECEE_API_KEY gives it to later ones)."""
    key = key.strip()
    if not key:
        forget_api_key(name)
        return ""
    _process_keys.pop(name, None)
    try:
        keyring.set_password(KEYRING_SERVICE, name, key)
        return ""
    except keyring.errors.NoKeyringError:
        _process_keys[name] = key
        return NO_KEYRING
    except keyring.errors.KeyringError as exc:  # locked, refused, D-Bus trouble
        _process_keys[name] = key
        return f"the OS keyring refused the key ({exc or type(exc).__name__})"


def api_key(name: str) -> str | None:
    """The endpoint's key: the keyring's, else this process's, else SPECEE_API_KEY, else None."""
    return api_key_source(name)[0]


def api_key_source(name: str) -> tuple[str | None, str]:
    """The key and where it came from ("OS keyring", "this session", SPECEE_API_KEY; "" for none)."""
    try:
        stored = keyring.get_password(KEYRING_SERVICE, name)
    except keyring.errors.KeyringError:
        stored = None
    if stored:
        return stored, "OS keyring"
    if name in _process_keys:
        return _process_keys[name], "this session"
    from_env = knobs.API_KEY.text()
    if from_env:
        return from_env, API_KEY_ENV
    return None, ""


def forget_api_key(name: str) -> None:
    _process_keys.pop(name, None)
    try:
        keyring.delete_password(KEYRING_SERVICE, name)
    except keyring.errors.KeyringError:  # none stored (PasswordDeleteError), or no keyring at all
        pass
