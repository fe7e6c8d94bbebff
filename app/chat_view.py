"""The conversation as message cards: who said it (avatar and name), the text as Markdown with its
line breaks, code blocks highlighted with a Copy button each, and the answer's speed underneath.
A streaming answer updates its own card in place (only the widgets whose text changed), and the
reader's scroll position is kept unless they were following the end."""

from __future__ import annotations

import re

from PySide6.QtCore import QEvent, QPoint, Qt, Signal
from PySide6.QtGui import QFontDatabase, QTextBlockFormat, QTextCursor, QTextDocument
from PySide6.QtWidgets import (
    QApplication,
    QFrame,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QScrollArea,
    QScrollBar,
    QSizePolicy,
    QVBoxLayout,
    QWidget,
)

from app.long_text import LongText
from app.message_actions import MessageActions
from engine.chats.long_input import is_long
from engine.chats.render import Segment, highlight_code, message_footer, message_segments
from engine.chats.session import message_version

READING_WIDTH = 820  # px: a comfortable line length for prose; the column stays centred
ROLES = {"user": ("You", "Y"), "assistant": ("Assistant", "A"), "system": ("System", "S")}


def prose_html(md: str) -> str:
    """Markdown as rich text with a reading line height (QLabel's Markdown mode has no way to set
    one): parsed by Qt's own Markdown reader, every block given 125% line height."""
    doc = QTextDocument()
    doc.setMarkdown(md)
    block = doc.begin()
    while block.isValid():
        fmt = block.blockFormat()
        fmt.setLineHeight(125, QTextBlockFormat.LineHeightTypes.ProportionalHeight.value)
        QTextCursor(block).setBlockFormat(fmt)
        block = block.next()
    return doc.toHtml()


def _markdown_to_text(md: str) -> str:
    doc = QTextDocument()
    doc.setMarkdown(md)
    return doc.toPlainText()


class CodeBlock(QFrame):
    """A highlighted code block with its language and a Copy button that copies exactly the code."""

    def __init__(self, segment: Segment, dark: bool) -> None:
        super().__init__()
        self.setObjectName("codeBlock")
        self.code = ""
        self.language = ""
        self.dark = dark
        self.lang_label = QLabel()
        self.lang_label.setObjectName("codeLang")
        self.copy_button = QPushButton("Copy")
        self.copy_button.setObjectName("codeCopy")
        self.copy_button.setAccessibleName("Copy code")
        self.copy_button.setCursor(Qt.CursorShape.PointingHandCursor)
        self.copy_button.clicked.connect(self.copy)
        self.text = QLabel()
        self.text.setObjectName("codeText")
        self.text.setTextFormat(Qt.TextFormat.RichText)
        self.text.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.text.setWordWrap(True)  # long lines wrap (pre-wrap) instead of widening the card
        self.text.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        top = QHBoxLayout()
        top.setContentsMargins(0, 0, 0, 0)
        top.addWidget(self.lang_label)
        top.addStretch()
        top.addWidget(self.copy_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(12, 6, 8, 10)
        layout.setSpacing(4)
        layout.addLayout(top)
        layout.addWidget(self.text)
        self.set_segment(segment)

    def set_segment(self, segment: Segment, dark: bool | None = None) -> None:
        dark = self.dark if dark is None else dark
        if (segment.text, segment.language, dark) == (self.code, self.language, self.dark) and self.text.text():
            return
        self.code, self.language, self.dark = segment.text, segment.language, dark
        self.lang_label.setText(segment.language or "code")
        html = highlight_code(segment.text, segment.language, dark)
        self.text.setText(html.replace('<pre style="margin:0">', '<pre style="margin:0; white-space:pre-wrap">', 1))

    def copy(self) -> None:
        QApplication.clipboard().setText(self.code)
        self.copy_button.setText("Copied")


class MessageCard(QFrame):
    """One message: avatar and role, then its segments, then a footer (speed, interrupted)."""

    def __init__(self, role: str, dark: bool) -> None:
        super().__init__()
        self.role = role
        self.dark = dark
        self.content: str | None = None
        self.footer_lines: list[str] = []
        self.segments: list[Segment] = []
        self.setObjectName(f"card_{role}" if role in ("user", "assistant", "error") else "card_notice")
        name, letter = ROLES.get(role, (role.title(), role[:1].upper()))
        avatar = QLabel(letter)
        avatar.setObjectName(f"avatar_{role}")
        avatar.setFixedSize(26, 26)
        avatar.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.role_label = QLabel(name)
        self.role_label.setObjectName("roleLabel")
        head = QHBoxLayout()
        head.setContentsMargins(0, 0, 0, 0)
        head.setSpacing(8)
        head.addWidget(avatar)
        head.addWidget(self.role_label)
        head.addStretch()
        # a question's or an answer's own actions: its versions, Edit (questions), Copy
        self.message_actions = MessageActions(role) if role in ("user", "assistant") else None
        if self.message_actions is not None:
            head.addWidget(self.message_actions)
        self.body = QVBoxLayout()
        self.body.setContentsMargins(0 if role in ("notice", "error") else 34, 0, 0, 0)
        self.body.setSpacing(8)
        self.footer = QLabel()
        self.footer.setObjectName("cardFooter")
        self.footer.setWordWrap(True)  # a long model name and a mark must not widen the card past the view
        self.footer.setVisible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(14, 12, 16, 12)
        layout.setSpacing(6)
        layout.addLayout(head)
        if role in ("notice", "error"):  # the engine speaking (limits, errors): text only, no avatar
            avatar.hide()
            self.role_label.hide()
        layout.addLayout(self.body)
        layout.addWidget(self.footer)
        self.widgets: list[QWidget] = []

    def set_message(self, content: str, footer: list[str]) -> None:
        if content != self.content:
            self.content = content
            if self.role == "user" and is_long(content):  # a paste: collapsed, with "Show all"
                self._set_segments([Segment("long", content)])
            else:
                self._set_segments(message_segments(content) or [Segment("text", "…")])
            if self.message_actions is not None:
                self.message_actions.copy_button.setText("Copy")  # another message (or more of it) since the last copy
        if footer != self.footer_lines:
            self.footer_lines = footer
            self.footer.setText("   ·   ".join(footer))
            self.footer.setVisible(bool(footer))

    def set_dark(self, dark: bool) -> None:
        self.dark = dark
        for seg, w in zip(self.segments, self.widgets, strict=True):
            if isinstance(w, CodeBlock):
                w.set_segment(seg, dark)

    def _set_segments(self, segments: list[Segment]) -> None:
        same_shape = [s.kind for s in segments] == [s.kind for s in self.segments]
        if not same_shape:  # a new block began: rebuild this card's body (only this card)
            for w in self.widgets:
                self.body.removeWidget(w)
                w.deleteLater()
            self.widgets = [self._widget(s) for s in segments]
            for w in self.widgets:
                self.body.addWidget(w)
                w.show()
        else:  # streaming: the same blocks, longer; update the texts in place
            for seg, old, w in zip(segments, self.segments, self.widgets, strict=True):
                if seg != old:
                    if isinstance(w, CodeBlock):
                        w.set_segment(seg)
                    elif isinstance(w, LongText):
                        w.set_text(seg.text)
                    else:
                        assert isinstance(w, QLabel)
                        w.setText(prose_html(seg.text))
        self.segments = segments

    def _widget(self, seg: Segment) -> QWidget:
        if seg.kind == "code":
            return CodeBlock(seg, self.dark)
        if seg.kind == "long":
            return LongText(seg.text)
        label = QLabel(prose_html(seg.text))
        label.setObjectName("messageText")
        label.setTextFormat(Qt.TextFormat.RichText)
        label.setWordWrap(True)
        label.setOpenExternalLinks(True)
        label.setTextInteractionFlags(
            Qt.TextInteractionFlag.TextSelectableByMouse | Qt.TextInteractionFlag.LinksAccessibleByMouse
        )
        label.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        return label

    def plain_text(self) -> str:
        parts = [] if self.role in ("notice", "error") else [self.role_label.text()]
        for seg in self.segments:
            parts.append(seg.text.rstrip("\n") if seg.kind in ("code", "long") else _markdown_to_text(seg.text))
        parts += self.footer_lines
        return "\n".join(parts)

    def code_blocks(self) -> list[CodeBlock]:
        return [w for w in self.widgets if isinstance(w, CodeBlock)]


class ChatView(QScrollArea):
    """The scrolling column of message cards (and notices, or a hint when the chat is empty)."""

    # a card's action: ("copy" | "edit" | "page", the message's index, the page step or 0)
    action = Signal(str, int, int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("chatScroll")
        self.setAccessibleName("Conversation")
        self.setWidgetResizable(True)
        self.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.setFocusPolicy(Qt.FocusPolicy.NoFocus)
        self.dark = False
        self.idle = True  # no answer streams: the cards' Edit and version pager may act
        self.cards: list[MessageCard] = []
        canvas = QWidget()
        canvas.setObjectName("chatCanvas")
        # its height is the cards' height at the view's width (heightForWidth), never the layout's
        # minimum: wrapped labels' minimum heights, taken at a narrower width, ran the scroll range
        # up to thousands of pixels past the last card, and a long chat opened on an empty pane
        canvas.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Ignored)
        self.column = QVBoxLayout()
        self.column.setContentsMargins(0, 18, 0, 18)
        self.column.setSpacing(12)
        self.hint = QLabel()
        self.hint.setObjectName("hint")
        self.hint.setWordWrap(True)
        self.hint.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.column.addWidget(self.hint)
        self.column.addStretch(1)
        column_widget = QWidget()
        column_widget.setLayout(self.column)
        column_widget.setMaximumWidth(READING_WIDTH)
        outer = QHBoxLayout(canvas)
        outer.setContentsMargins(20, 0, 20, 0)
        outer.addStretch(1)  # the margins take what the column (at most READING_WIDTH) leaves
        outer.addWidget(column_widget, 100)
        outer.addStretch(1)
        self.setWidget(canvas)
        # Following: while the reader is at the end, the end stays in view as text arrives and the
        # cards settle (the range grows after this call returns, as labels get their heights); a
        # reader who scrolled up stays where they are.
        self.following = True
        self._moving = False
        # a search hit opened: its card is highlighted and kept at the top as the cards settle (until
        # the reader scrolls); None: none is
        self.matched: int | None = None
        self._match_block: QWidget | None = None  # the block of its text that matched
        self._pinned = False
        bar = self.verticalScrollBar()
        bar.rangeChanged.connect(self._on_range)
        bar.valueChanged.connect(self._on_scrolled)
        app = QApplication.instance()
        if isinstance(app, QApplication):  # Tab onto a code block's Copy (from the message box too) shows it
            app.focusChanged.connect(self._on_focus)

    def show_conversation(self, messages: list[dict], notices: list[str], hint: str = "", live: bool = False) -> None:
        """Cards for messages (then notices); cards whose text did not change are left alone. live:
        the last message is the answer being written now."""
        last = len(messages) - 1
        items = [(m["role"], m["content"], message_footer(m, live and i == last)) for i, m in enumerate(messages)]
        # the engine's words after the chat: an error ("**Title:** what to do") or a notice
        items += [("error" if n.startswith("**") else "notice", n, []) for n in notices]
        for i, (role, content, footer) in enumerate(items):
            if i < len(self.cards) and self.cards[i].role != role:
                self._drop_cards_from(i)
            if i == len(self.cards):
                card = MessageCard(role, self.dark)
                self._connect(card, i)
                self.cards.append(card)
                self.column.insertWidget(self.column.count() - 1, card)
                card.show()  # now, not at the next event loop turn: the layout counts only shown widgets
            self.cards[i].set_message(content, footer)
            if (row := self.cards[i].message_actions) is not None:
                row.set_version(*message_version(messages[i]), idle=self.idle)
        self._drop_cards_from(len(items))
        self.hint.setText(hint if not items else "")
        self.hint.setVisible(not items and bool(hint))
        self._settle()
        if self.following:
            self._to_end()

    def scroll_to_end(self) -> None:
        """Show the end and follow it from now on (a chat opened, a question sent)."""
        self._highlight(None)
        self.following = True
        self._to_end()

    def show_match(self, index: int, query: str = "") -> None:
        """Show cards[index], a search hit, highlighted (instead of the chat's end): from its top, or
        from the block of it that holds query's words when that is further down a long message."""
        self._highlight(index)
        words = [re.compile(rf"\b{re.escape(w)}", re.I) for w in query.split()]
        card = self.cards[index]
        # the first block with the most of its words (a search matches them all, each maybe elsewhere)
        blocks = enumerate(zip(card.segments, card.widgets, strict=True))
        found = [(sum(bool(r.search(seg.text)) for r in words), -i, w) for i, (seg, w) in blocks]
        best = max(found, key=lambda f: f[:2], default=None)
        self._match_block = best[2] if best and best[0] else None
        self.following, self._pinned = False, True
        self._to_match()

    def _to_match(self) -> None:
        if self.matched is None:
            return
        card = self.cards[self.matched]
        self._settle()
        inner = self.widget()
        assert inner is not None  # the scroll area's own, set in __init__
        y = card.mapTo(inner, QPoint(0, 0)).y() - 12
        block = self._match_block
        if block is not None and block in card.widgets:
            below = block.mapTo(inner, QPoint(0, 0)).y() - 24
            if below - y > self.viewport().height() // 2:  # the card's top would leave the match out of view
                y = below
        self._moving = True
        self.verticalScrollBar().setValue(y)
        self._moving = False

    def _highlight(self, index: int | None) -> None:
        """The card of a search hit gets the focus ring's colour around it (one card at a time)."""
        if self.matched is not None and self.matched < len(self.cards):
            old = self.cards[self.matched]
            old.setProperty("match", False)
            old.setStyleSheet("")
        self.matched, self._pinned = index, False
        if index is not None:
            card = self.cards[index]
            card.setProperty("match", True)
            card.setStyleSheet(f"#{card.objectName()} {{ border: 2px solid palette(highlight); }}")

    def _to_end(self) -> None:
        bar = self.verticalScrollBar()
        self._moving = True
        bar.setValue(bar.maximum())
        self._moving = False

    def scroll_by(self, action: str) -> None:
        """The keyboard's scrolling: "page_up", "page_down", "home" or "end"."""
        if action == "end":
            self.scroll_to_end()
            return
        step = {"page_up": QScrollBar.SliderAction.SliderPageStepSub, "page_down": QScrollBar.SliderAction.SliderPageStepAdd}
        self.verticalScrollBar().triggerAction(step.get(action, QScrollBar.SliderAction.SliderToMinimum))

    def _on_focus(self, _old: QWidget | None, new: QWidget | None) -> None:
        if new is not None and self.widget().isAncestorOf(new):  # type: ignore[union-attr]  # set in __init__
            self.ensureWidgetVisible(new, 0, 24)

    def _on_range(self, _minimum: int, _maximum: int) -> None:
        if self.following:
            self._to_end()
        elif self._pinned:
            self._to_match()

    def _on_scrolled(self, value: int) -> None:
        if not self._moving:  # the reader moved (wheel, keys, the bar): follow only from the end
            self.following = value >= self.verticalScrollBar().maximum() - 4
            self._pinned = False

    def set_dark(self, dark: bool) -> None:
        self.dark = dark
        for card in self.cards:
            card.set_dark(dark)

    def _connect(self, card: MessageCard, i: int) -> None:
        if card.message_actions is not None:
            card.message_actions.copy_requested.connect(lambda: self.action.emit("copy", i, 0))
            card.message_actions.edit_requested.connect(lambda: self.action.emit("edit", i, 0))
            card.message_actions.page_requested.connect(lambda step: self.action.emit("page", i, step))

    def _drop_cards_from(self, i: int) -> None:
        if self.matched is not None and self.matched >= i:
            self._highlight(None)
        for card in self.cards[i:]:
            self.column.removeWidget(card)
            card.deleteLater()
        del self.cards[i:]

    def _settle(self) -> None:
        """Lay the cards out now, so the scroll range is current when the position is restored."""
        QApplication.sendPostedEvents(None, QEvent.Type.LayoutRequest)
        QApplication.sendEvent(self, QEvent(QEvent.Type.LayoutRequest))  # the scroll range follows now

    def code_blocks(self) -> list[CodeBlock]:
        return [b for card in self.cards for b in card.code_blocks()]

    def toPlainText(self) -> str:
        parts = [card.plain_text() for card in self.cards]
        if not self.cards and self.hint.text():
            parts.append(self.hint.text())
        return "\n\n".join(parts)
