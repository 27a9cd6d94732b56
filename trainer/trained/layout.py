"""An exported model's format name and files (`rasp export` writes them,
`rasp.load` reads them), apart from trainer/trained/inference.py so that
`rasp export`'s parser is built without torch."""

EXPORT_FORMAT = "rasp-export/1"
FAN_FILES = ("config.json", "model.safetensors", "vocab.json", "program.rasp")
SEQ_FILES = ("config.json", "model.safetensors", "vocab.json")


def model_files(kind: str) -> tuple:
    """The files of an exported model that its manifest checks."""
    return FAN_FILES if kind == "fan" else SEQ_FILES
