# Windows: frozen app + Inno Setup installer. Run from the repository root in PowerShell.
#   $env:SPECEE_BACKEND = "cuda,vulkan"   # each a module loaded at run time; needs the CUDA toolkit and the Vulkan SDK
#   python -m venv .venv; .venv\Scripts\pip install -e ".[dev,package]"; .venv\Scripts\python native\build.py
#   powershell -File packaging\windows\build_windows.ps1
$ErrorActionPreference = "Stop"
$model = & .venv\Scripts\python -c "from engine.models.default_model import ensure_default_model; print(ensure_default_model())"
$env:SPECEE_BUNDLE_MODEL = $model
& .venv\Scripts\python -m PyInstaller --noconfirm --distpath build\win --workpath build\win-work packaging\specee-chat.spec
& build\win\specee-chat\specee-chat.exe --selftest | Out-File build\win\selftest.json
$env:SPECEE_VERSION = & .venv\Scripts\python -c "from engine import __version__; print(__version__)"
& iscc packaging\windows\specee-chat.iss
if ($env:WINDOWS_SIGN_PFX) {
  Get-ChildItem dist\*.exe | ForEach-Object {
    & signtool sign /f $env:WINDOWS_SIGN_PFX /p $env:WINDOWS_SIGN_PASSWORD /tr http://timestamp.digicert.com /td sha256 /fd sha256 $_.FullName
  }
}
