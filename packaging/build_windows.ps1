# Builds the Windows installer (run in PowerShell from the repository root, with Python 3.11+
# and Inno Setup 6 installed):  powershell -ExecutionPolicy Bypass -File packaging\build_windows.ps1
# Output: dist\duplexcadence\ (the folder bundle) and dist\duplexcadence-VERSION-windows-x86_64.exe.
$ErrorActionPreference = "Stop"
python -m venv build\venv
$py = "build\venv\Scripts\python.exe"
# PyPI's Windows torch is the CPU build: the lean installer carries it.
& $py -m pip install "torch>=2.11,<2.14" "pyinstaller>=6.10,<7" pillow .
if ($LASTEXITCODE) { throw "pip install failed" }
# GPU support on Windows comes from PyTorch's own index (PyPI has no Windows CUDA build).
& $py packaging\resolve_cuda_torch.py build\cuda_torch.json --index-url https://download.pytorch.org/whl/cu130 --local-version cu130
if ($LASTEXITCODE) { throw "resolving GPU support failed" }
& $py -m PyInstaller --noconfirm --clean --distpath dist --workpath build\pyinstaller packaging\duplexcadence.spec
if ($LASTEXITCODE) { throw "PyInstaller failed" }
$defines = & $py -c "from app.project_info import project_info as p; i = p(); out = i.artifact('windows', 'x86_64', 'exe')[:-4]; print(f'/DAppName={i.name} /DAppDisplayName={i.display_name} /DAppVersion={i.version} /DAppId={i.app_id} /DOutputName={out}')"
$iscc = "${env:ProgramFiles(x86)}\Inno Setup 6\ISCC.exe"
& $iscc $defines.Split(" ") packaging\windows\duplexcadence.iss
if ($LASTEXITCODE) { throw "ISCC failed" }
