"""The hyper-parameters of every run: one class, the description of each setting, and the checks, help and resume rules made from it."""
