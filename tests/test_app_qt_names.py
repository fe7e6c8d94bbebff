"""Widgets whose attributes once took the name of a Qt method (the type checker of `make lint` found
them): Qt's own API on those widgets still answers."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtGui import QPixmap
from PySide6.QtWidgets import QDialog
from pytestqt.qtbot import QtBot

from app.chat_panel import ChatPanel
from app.chat_view import MessageCard
from app.endpoint_dialog import EndpointDialog
from engine.chats.session import ChatSession
from engine.remote.endpoints import EndpointRegistry


def test_the_endpoint_dialog_keeps_qdialogs_result(qtbot: QtBot, tmp_path: Path) -> None:
    dialog = EndpointDialog(EndpointRegistry(tmp_path / "endpoints.json"))
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.reject()
    assert dialog.result() == QDialog.DialogCode.Rejected
    assert dialog.test_result.text().startswith("llama-server, vLLM")  # the connection test's line


def test_a_message_card_keeps_qwidgets_actions(qtbot: QtBot) -> None:
    card = MessageCard("assistant", dark=False)
    qtbot.addWidget(card)
    assert card.actions() == []  # QWidget.actions(): none added
    assert card.message_actions is not None and card.message_actions.copy_button.text() == "Copy"


def test_the_chat_panel_keeps_qwidgets_render(qtbot: QtBot) -> None:
    panel = ChatPanel(ChatSession(), lambda _msg: True)
    qtbot.addWidget(panel)
    target = QPixmap(64, 64)
    panel.render(target)  # QWidget.render: the panel painted into a pixmap
    assert not target.isNull()
