"""The conversation list's rows while a search is typed: the title, and under it a line of the
message that matched, its matching words in bold, cut so that the first of them shows (a long
message's match is rarely at its start)."""

from __future__ import annotations

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, QRect, QSize, Qt
from PySide6.QtGui import QFont, QFontMetrics, QPainter
from PySide6.QtWidgets import QStyle, QStyleOptionViewItem

from app.rename_delegate import RenameDelegate

SNIPPET_ROLE = Qt.ItemDataRole.UserRole + 1  # the snippet of a row's best match ("" when none)
MARK = ("\x02", "\x03")  # around each matching word in the store's snippet (ConversationStore.search)


def snippet_parts(snippet: str) -> list[tuple[str, bool]]:
    """(text, matched) pieces of a marked snippet, its whitespace (line breaks too) as single spaces."""
    flat = " ".join(snippet.split())  # the marks are not whitespace: they stay
    parts: list[tuple[str, bool]] = []
    for i, piece in enumerate(flat.split(MARK[0])):
        matched, _, rest = piece.partition(MARK[1]) if i else ("", "", piece)
        parts += [(text, bold) for text, bold in ((matched, True), (rest, False)) if text]
    return parts


def snippet_text(snippet: str) -> str:
    """The snippet as plain text (what the row says, for tests and screen readers)."""
    return " ".join(snippet.replace(MARK[0], "").replace(MARK[1], "").split())


class SearchResultDelegate(RenameDelegate):
    def sizeHint(self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> QSize:
        size = super().sizeHint(option, index)
        if index.data(SNIPPET_ROLE):
            size.setHeight(size.height() + QFontMetrics(self._small(option.font)).lineSpacing() + 2)
        return size

    @staticmethod
    def _small(font: QFont) -> QFont:
        small = QFont(font)
        small.setPointSizeF(max(font.pointSizeF() - 1, 7.0))
        return small

    def paint(self, painter: QPainter, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex) -> None:
        snippet = index.data(SNIPPET_ROLE)
        if not snippet:
            super().paint(painter, option, index)
            return
        opt = QStyleOptionViewItem(option)
        self.initStyleOption(opt, index)
        title, opt.text = opt.text, ""
        widget = opt.widget
        style = widget.style() if widget is not None else None
        if style is None:
            return
        style.drawControl(QStyle.ControlElement.CE_ItemViewItem, opt, painter, widget)  # background, selection
        area = style.subElementRect(QStyle.SubElement.SE_ItemViewItemText, opt, widget)
        fm = QFontMetrics(opt.font)
        small = self._small(opt.font)
        top = QRect(area.x(), area.y(), area.width(), fm.height())
        painter.save()
        painter.setFont(opt.font)
        painter.setPen(opt.palette.text().color())
        flags = int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        painter.drawText(top, flags, fm.elidedText(title, Qt.TextElideMode.ElideRight, area.width()))
        below = QRect(area.x(), top.bottom() + 2, area.width(), area.bottom() - top.bottom() - 2)
        self._draw_snippet(painter, snippet, below, small, opt)
        painter.restore()

    def _draw_snippet(self, painter: QPainter, snippet: str, rect: QRect, font: QFont, opt: QStyleOptionViewItem) -> None:
        bold = QFont(font)
        bold.setBold(True)
        parts = snippet_parts(snippet)
        metrics = {False: QFontMetrics(font), True: QFontMetrics(bold)}
        width = sum(metrics[b].horizontalAdvance(t) for t, b in parts)
        if width > rect.width() and parts and not parts[0][1]:
            # the first match would be cut off: start a little before it instead of at the snippet's start
            words, room = parts[0][0].lstrip("…").split(" "), rect.width() // 3
            while len(words) > 1 and metrics[False].horizontalAdvance("…" + " ".join(words)) > room:
                words.pop(0)  # whole words
            parts[0] = ("…" + " ".join(words), False)
        muted = opt.palette.placeholderText().color()
        x, flags = rect.x(), int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
        for text, is_match in parts:
            fm = metrics[is_match]
            left = rect.right() - x
            if left <= fm.horizontalAdvance("…"):
                break
            shown = fm.elidedText(text, Qt.TextElideMode.ElideRight, left)
            painter.setFont(bold if is_match else font)
            painter.setPen(opt.palette.text().color() if is_match else muted)
            painter.drawText(QRect(x, rect.y(), left, rect.height()), flags, shown)
            x += fm.horizontalAdvance(shown)
            if shown != text:
                break
