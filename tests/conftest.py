import os

# Nothing may reach a model hub at test time.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
