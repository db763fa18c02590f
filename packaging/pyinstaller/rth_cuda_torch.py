# PyInstaller runtime hook: when the user has installed GPU support (the CUDA build of torch,
# fetched by the app on first run, app/gpu/cuda_torch.py), it is put ahead of the bundled CPU build
# on the import path, before anything imports torch.
from app.gpu.cuda_torch import activate_installed

activate_installed()
