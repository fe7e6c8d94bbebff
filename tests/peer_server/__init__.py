"""llama.cpp's own server tests (tools/server/tests of the pinned sources) against `specee serve`.

`plugin.py` is the adapter (a pytest plugin loaded into a pytest run of their files: it replaces
only how the server starts), `exclusions.py` the documented list of what is not ours to pass, and
tests/test_peer_server_suite.py the entry that runs them in `make test`.
"""
