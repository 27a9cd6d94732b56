"""The generated tables of docs/models.md and docs/benchmarks.md.

A block `<!-- KIND:ARG -->` … `<!-- /KIND -->` in those files holds a table
made here from the code, so the documents cannot drift from it:

    published:SUITE/TABLE   a paper's published figures, from the suite file
                            (trainer/compare/suites/SUITE.toml; `reference`
                            = bench/reference.toml), whose numbers
                            tests/test_compare.py checks against the papers
    presets:family          the optimiser, batch and steps of each task family
                            per preset (trainer/benchmark/presets.py FAMILY)
    presets:models          each comparison model's settings per preset and
                            task family, as `rasp train` resolves them

tests/test_docs.py checks that the files hold what `fill` makes;
`python tests/doc_tables.py --write` rewrites the blocks.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

DOCS = (ROOT / "docs" / "models.md", ROOT / "docs" / "benchmarks.md")
BLOCK = re.compile(r"(<!-- (\w+):([\w/]+) -->\n)(.*?)(<!-- /\2 -->)", re.S)

# one task per family: the preset a run gets depends only on the family
FAMILY_TASKS = {"flipflop": "flipflop", "words": "words_z60", "listops": "listops", "logic": "logic",
                "memory": "copying", "counting": "counting"}
SIZE_KEYS = (("d_model", "d"), ("n_layer", "layers"), ("n_head", "heads"), ("d_ff", "d_ff"),
             ("dropout", "dropout"), ("pooling", "pooling"))
OPT_KEYS = (("batch_size", "batch"), ("steps", "steps"), ("lr", "lr"), ("schedule", ""), ("warmup", "warm-up"),
            ("betas", "betas"), ("weight_decay", "wd"), ("grad_clip", "clip"), ("loss_first", "loss_first"),
            ("loss_grow_every", "loss_grow_every"))
OPTIONAL_KEYS = ("warmup", "loss_first", "loss_grow_every")      # shown only where set


def _num(v) -> str:
    if isinstance(v, bool) or v is None:
        return str(v).lower()
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:,}".replace(",", " ")
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_num(x) for x in v) + ")"
    return str(v)


def _row(cells) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(header, rows) -> str:
    return "\n".join([_row(header), _row(["---"] * len(header))] + [_row(r) for r in rows])


# ---- published figures ----------------------------------------------------------------

def _suite(name: str):
    from trainer.compare.suite import load_suite
    return load_suite(str(ROOT / "bench" / "reference.toml") if name == "reference" else name)


def _value(v, sd) -> str:
    if v is None:
        return "—"
    return str(v) + (f" ± {sd}" if sd not in (None, "—") else "")


def published_table(arg: str) -> str:
    """The published figures of one suite table; rows without any are left out.
    Many ✓/✗ columns ("Z60 1X", "Z60 2X", …) are grouped by their first word."""
    suite_name, table_id = arg.split("/")
    suite = _suite(suite_name)
    table = next(t for t in suite.tables if t.id == table_id)
    rows = [r for r in table.rows if any(v is not None for v in r.published)]
    labels = [c.label.replace("ours / ", "") for c in table.columns]
    source = suite.sources[table.source]
    head = (f"*{table.title}.*  {source.cite}, {table.paper_table}; {table.statistic}.  "
            f"Source: `{Path(suite.path).relative_to(ROOT)}`, table `{table.id}`.")
    groups = [lab.split(" ", 1) for lab in labels]
    if len(labels) > 8 and all(len(g) == 2 for g in groups):
        order = list(dict.fromkeys(g[0] for g in groups))
        subs = {k: [g[1] for g in groups if g[0] == k] for k in order}
        header = ["", *(f"{k}: {' '.join(subs[k])}" for k in order)]
        body = [[r.label, *(" ".join(_value(v, None) for v, g in zip(r.published, groups) if g[0] == k)
                            for k in order)] for r in rows]
        return head + "\n\n" + _table(header, body)
    body = [[r.label, *(_value(v, (r.published_sd or [None] * len(labels))[i]) for i, v in enumerate(r.published))]
            for r in rows]
    return head + "\n\n" + _table(["", *labels], body)


# ---- presets --------------------------------------------------------------------------

def _resolved(model: str, preset: str, family: str):
    from trainer.models import get_encoder_spec
    from trainer.benchmark.presets import make_seq_hparams
    from trainer.tasks import TASKS
    return make_seq_hparams(preset, TASKS[FAMILY_TASKS[family]], get_encoder_spec(model), {}, {})


def _opt(hp) -> str:
    parts = []
    for key, name in OPT_KEYS:
        v = getattr(hp, key)
        if key in OPTIONAL_KEYS and not v:
            continue
        parts.append(f"{name} {_num(v)}".strip())
    return ", ".join(parts)


def family_table(arg: str) -> str:
    from trainer.settings.hparams import defaults
    from trainer.benchmark.presets import FAMILY
    rows = []
    for preset in ("cpu", "paper"):
        for family in FAMILY_TASKS:
            hp = defaults("seq")
            for k, v in FAMILY[preset].get(family, {}).items():
                setattr(hp, k, v)
            splits = f"{hp.train_split} / {hp.valid_split}"
            rows.append([preset, family, _opt(hp), splits])
    return _table(["preset", "family", "optimiser (AdamW) and schedule", "train / valid split"], rows)


def models_table(arg: str) -> str:
    """One table per model: the sizes it trains with per preset and task
    family (families with the same settings share a row), the optimiser
    settings it changes from the family's, its own options the preset sets;
    the model's defaults above the table."""
    from trainer.models import comparison_models, get_encoder_spec
    from trainer.settings.hparams import HParams
    fields = set(HParams.names("seq"))
    out = []
    for name in sorted(comparison_models()):
        spec = get_encoder_spec(name)
        rows = []
        for preset in ("cpu", "paper"):
            merged = {}
            for family in FAMILY_TASKS:
                hp = _resolved(name, preset, family)
                own = dict((spec.presets.get(preset) or {}).get(family, {}))
                opt = ", ".join(f"{n or k} {_num(getattr(hp, k))}".strip() for k, n in OPT_KEYS if k in own)
                extra = ", ".join(f"{k} {_num(v)}" for k, v in own.items() if k not in fields)
                size = ", ".join(f"{n} {_num(getattr(hp, k))}" for k, n in SIZE_KEYS)
                merged.setdefault((size, opt or "the family's", extra or "—"), []).append(family)
            for (size, opt, extra), fams in merged.items():
                rows.append([preset, ", ".join(fams), size, opt, extra])
        defaults = ", ".join(f"{k} {_num(v)}" for k, v in spec.defaults.items()) or "none"
        out.append(f"**`{name}`** — {spec.description}.  Its options' defaults: {defaults}.\n\n"
                   + _table(["preset", "families", "sizes", "optimiser", "options set by the preset"], rows))
    return "\n\n".join(out)


MAKERS = {"published": published_table, "presets": lambda arg: {"family": family_table,
                                                                "models": models_table}[arg](arg)}


def fill(text: str) -> str:
    """`text` with every generated block made afresh."""
    return BLOCK.sub(lambda m: m.group(1) + MAKERS[m.group(2)](m.group(3)) + "\n\n" + m.group(5), text)


def blocks(text: str) -> list:
    return [(m.group(2), m.group(3)) for m in BLOCK.finditer(text)]


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        sys.exit("usage: python tests/doc_tables.py --write")
    for path in DOCS:
        path.write_text(fill(path.read_text(encoding="utf-8")), encoding="utf-8")
