#!/bin/sh
# macOS: SpecEE Chat.app in a DMG. Run from the repository root on a Mac (Apple silicon: Metal).
#   SPECEE_BACKEND=metal make setup && .venv/bin/pip install -e '.[package]' && sh packaging/macos/build_macos.sh
# Signing and notarization run only when their secrets are set (CI: repository secrets).
set -eu
VERSION=$(.venv/bin/python -c "from engine import __version__; print(__version__)")
MODEL=$(.venv/bin/python -c "from engine.models.default_model import ensure_default_model; print(ensure_default_model())")
SPECEE_BUNDLE_MODEL="$MODEL" .venv/bin/python -m PyInstaller --noconfirm --distpath build/mac --workpath build/mac-work packaging/specee-chat.spec
APP="build/mac/SpecEE Chat.app"
"$APP/Contents/MacOS/specee-chat" --selftest > build/mac/selftest.json   # the bundle runs, worker included
if [ -n "${MACOS_SIGN_IDENTITY:-}" ]; then
  codesign --deep --force --options runtime --timestamp --sign "$MACOS_SIGN_IDENTITY" "$APP"
fi
mkdir -p dist
DMG="dist/SpecEE-Chat-$VERSION-macos-arm64.dmg"
hdiutil create -volname "SpecEE Chat" -srcfolder "$APP" -ov -format UDZO "$DMG"
if [ -n "${MACOS_NOTARY_PROFILE:-}" ]; then
  xcrun notarytool submit "$DMG" --keychain-profile "$MACOS_NOTARY_PROFILE" --wait
  xcrun stapler staple "$DMG"
fi
echo "$DMG"
