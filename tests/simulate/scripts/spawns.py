"""A parent that starts a Python child: the child runs on the simulated device too."""

import os
import subprocess
import sys

if __name__ == "__main__":
    child = os.path.join(os.path.dirname(os.path.abspath(__file__)), "child_bug.py")
    subprocess.run([sys.executable, child], check=False)
    print("OK")
