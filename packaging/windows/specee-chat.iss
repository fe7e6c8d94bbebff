; Windows installer (Inno Setup 6). Build the frozen app first (PyInstaller onedir in
; build\win\specee-chat, see packaging/windows/build_windows.ps1), then: iscc packaging\windows\specee-chat.iss
#define AppVersion GetEnv("SPECEE_VERSION")
#if AppVersion == ""
  #define AppVersion "0.1.0"
#endif

[Setup]
AppId={{6C1B0E55-3F9B-4E0B-9E4E-5B9B2C7D3A11}
AppName=SpecEE Chat
AppVersion={#AppVersion}
AppPublisher=SpecEE Chat
DefaultDirName={autopf}\SpecEE Chat
DefaultGroupName=SpecEE Chat
OutputDir=..\..\dist
OutputBaseFilename=SpecEE-Chat-{#AppVersion}-windows-x64-setup
Compression=lzma2/max
SolidCompression=yes
ArchitecturesInstallIn64BitMode=x64compatible
PrivilegesRequiredOverridesAllowed=dialog
WizardStyle=modern

[Files]
Source: "..\..\build\win\specee-chat\*"; DestDir: "{app}"; Flags: recursesubdirs createallsubdirs ignoreversion

[Icons]
Name: "{group}\SpecEE Chat"; Filename: "{app}\specee-chat.exe"
Name: "{autodesktop}\SpecEE Chat"; Filename: "{app}\specee-chat.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "Create a desktop shortcut"; Flags: unchecked

[Run]
Filename: "{app}\specee-chat.exe"; Description: "Start SpecEE Chat"; Flags: nowait postinstall skipifsilent
