"""Every keyboard shortcut of the main window, in one registry: the menu bar (app/menu_bar.py) binds
the window's own from it and the shortcuts help (app/shortcuts_help.py) lists all of it, so the two
cannot drift apart (tests/test_app_menu.py checks that every key bound in the window is here)."""

from __future__ import annotations

from dataclasses import dataclass

MENUS = ("File", "Chat", "Model", "Server", "Help")


@dataclass(frozen=True)
class Shortcut:
    name: str  # the window's action for it (MenuBar.actions[name])
    label: str  # what it does, as the menu and the help say it
    keys: tuple[str, ...] = ()  # portable QKeySequence strings ("Ctrl+N"); the first is the menu's
    menu: str = ""  # the menu it sits in (one of MENUS); "" for keys a part of the window handles itself
    where: str = ""  # for those: where they work, as the help groups them


SHORTCUTS: tuple[Shortcut, ...] = (
    Shortcut("new_chat", "New chat", ("Ctrl+N",), "File"),
    Shortcut("import_chat", "Import chat…", (), "File"),
    Shortcut("settings", "Settings…", ("Ctrl+,",), "File"),
    Shortcut("quit", "Quit", ("Ctrl+Q",), "File"),
    Shortcut("search", "Search chats", ("Ctrl+K",), "Chat"),
    Shortcut("generation", "Generation…", ("Ctrl+G",), "Chat"),
    Shortcut("attach", "Attach file…", (), "Chat"),
    Shortcut("stop", "Stop the answer (or leave an edit)", ("Esc",), "Chat"),
    Shortcut("undo_delete", "Undo delete", ("Ctrl+Z",), "Chat"),
    # Ctrl+L: LM Studio's key for its model loader
    Shortcut("switch_model", "Switch model…", ("Ctrl+L",), "Model"),
    Shortcut("my_models", "My models…", ("Ctrl+Shift+M",), "Model"),
    Shortcut("download_models", "Download models…", ("Ctrl+Shift+D",), "Model"),
    Shortcut("serve", "Serve API", ("Ctrl+Shift+S",), "Server"),
    Shortcut("copy_api_address", "Copy API address", (), "Server"),
    Shortcut("shortcuts", "Keyboard shortcuts", ("F1", "Ctrl+/"), "Help"),
    Shortcut("about", "About SpecEE Chat", (), "Help"),
    # keys the message box, the chat and the chat list handle themselves (app/composer.py,
    # app/chat_panel.py, app/sidebar.py)
    Shortcut("send", "Send", ("Enter",), where="Message box"),
    Shortcut("new_line", "New line", ("Shift+Enter",), where="Message box"),
    Shortcut("leave_box", "Next control", ("Tab",), where="Message box"),
    Shortcut("page", "Scroll a page up / down", ("PgUp", "PgDown"), where="Reading the chat"),
    Shortcut("ends", "First / last message", ("Ctrl+Home", "Ctrl+End"), where="Reading the chat"),
    Shortcut("to_results", "From the search to its results", ("Down",), where="Chat list"),
    Shortcut("open_chat", "Open the chat", ("Enter",), where="Chat list"),
    Shortcut("rename_chat", "Rename the chat", ("F2",), where="Chat list"),
    Shortcut("delete_chat", "Delete the chat (Ctrl+Z undoes it)", ("Del",), where="Chat list"),
)

WHERE = tuple(dict.fromkeys(s.where for s in SHORTCUTS if s.where))  # the help's groups after the menus


def menu_entries(menu: str) -> list[Shortcut]:
    return [s for s in SHORTCUTS if s.menu == menu]


def window_keys() -> list[str]:
    """The keys the window's actions take: each once in the whole window (Qt runs neither of two
    shortcuts on one key)."""
    return [k for s in SHORTCUTS if s.menu for k in s.keys]
