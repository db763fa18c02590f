; Inno Setup 6 script for the Windows installer. Built by packaging/build_windows.ps1, which
; first builds the folder bundle (dist\duplexcadence) with packaging/duplexcadence.spec and then
; runs ISCC with the name, version and id read from pyproject.toml:
;   iscc /DAppName=duplexcadence /DAppDisplayName=DuplexCadence /DAppVersion=0.1.0 /DAppId=io.github.duplexcadence
;        /DOutputName=duplexcadence-0.1.0-windows-x86_64 packaging\windows\duplexcadence.iss
#ifndef AppName
  #error Run through packaging/build_windows.ps1 (it passes /DAppName, /DAppDisplayName, /DAppVersion, /DAppId, /DOutputName)
#endif

[Setup]
AppId={#AppId}
AppName={#AppDisplayName}
AppVersion={#AppVersion}
AppPublisher={#AppDisplayName} developers
DefaultDirName={autopf}\{#AppDisplayName}
DefaultGroupName={#AppDisplayName}
; Per-user by default (no administrator rights needed); the user may choose all users.
PrivilegesRequired=lowest
PrivilegesRequiredOverridesAllowed=dialog
ArchitecturesAllowed=x64compatible
ArchitecturesInstallIn64BitMode=x64compatible
OutputDir=..\..\dist
OutputBaseFilename={#OutputName}
UninstallDisplayIcon={app}\{#AppName}.exe
Compression=lzma2/max
SolidCompression=yes
WizardStyle=modern

[Files]
Source: "..\..\dist\{#AppName}\*"; DestDir: "{app}"; Flags: ignoreversion recursesubdirs createallsubdirs

[Icons]
Name: "{group}\{#AppDisplayName}"; Filename: "{app}\{#AppName}.exe"
Name: "{autodesktop}\{#AppDisplayName}"; Filename: "{app}\{#AppName}.exe"; Tasks: desktopicon

[Tasks]
Name: "desktopicon"; Description: "{cm:CreateDesktopIcon}"; GroupDescription: "{cm:AdditionalIcons}"

[Run]
Filename: "{app}\{#AppName}.exe"; Description: "{cm:LaunchProgram,{#AppDisplayName}}"; Flags: nowait postinstall skipifsilent
