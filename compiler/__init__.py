"""Compile n-RASP-L programs into looped decoder-only transformers.

    cm = compile_program(rasp.load("programs/parity.rasp"), max_len=16)
    cm.run_batch([[1, 0, -1, -2]])       # same outputs as the interpreter
    cm.save("out/parity"); load_compiled("out/parity")
    print(cm.report()); draw_layers(cm, "layers.svg")
"""
from .compiled import CompiledModel, DesignLengthWarning, compile_program, load_compiled
from .draw import draw_layers

__all__ = ["CompiledModel", "DesignLengthWarning", "compile_program", "load_compiled", "draw_layers"]
