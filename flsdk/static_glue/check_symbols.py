"""Build check run right after the backend's extension is linked (sources.cmake,
flsdk_backend_checks): the module must load with every symbol resolved.

An extension module cannot be linked with `-Wl,--no-undefined`: the Python C API
comes from the interpreter that imports it. So the check loads it the way Python
does (RTLD_NOW), in this interpreter, which provides exactly those symbols. A
kernel defined with another signature than generated/kernels.h declares (and
whose file escaped the compile check) shows up here as an undefined k_<name>.

Usage: python check_symbols.py <path of the built extension>
"""

from __future__ import annotations

import ctypes
import os
import re
import shutil
import subprocess
import sys


def demangle(symbol: str) -> str:
    tool = shutil.which("c++filt")
    if tool is None:
        return symbol
    proc = subprocess.run([tool, symbol], capture_output=True, text=True)
    return proc.stdout.strip() or symbol


def main(path: str) -> int:
    try:
        ctypes.CDLL(path, mode=os.RTLD_NOW | os.RTLD_LOCAL)
    except OSError as error:
        message = str(error)
        match = re.search(r"undefined symbol: (\S+)", message)
        if match is None:
            print(f"flsdk: {path} does not load: {message}", file=sys.stderr)
            return 1
        symbol = demangle(match.group(1))
        print(f"flsdk: {os.path.basename(path)} has an undefined symbol: {symbol}", file=sys.stderr)
        if "::kernels::k_" in symbol:
            print("flsdk: no kernel file defines this kernel with the signature generated/kernels.h "
                  "declares; define it exactly as declared there (run `flsdk gen` after changing "
                  "kernels)", file=sys.stderr)
        elif "::common::port::" in symbol:
            print("flsdk: kernels/kernel_port.cpp must define every function of "
                  "generated/kernel_lib/port.h with the signature declared there (port::queue "
                  "takes a plain function and its argument, as launch_host_kernel does; "
                  "cookiecutter-backend's kernel_port.cpp shows one)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
