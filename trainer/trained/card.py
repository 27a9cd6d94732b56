"""The model card of an export (`README.md`, written by `rasp export`,
trainer/trained/export.py), as cards on the Hugging Face hub are written:
YAML front matter (license, library_name, pipeline_tag, tags, model-index),
then use, training data, recipe, evaluation, intended use and limitations,
and citation.  Every relative link of the card names a file of the export:
the documents it cites (`tasks.md`, `LICENSE`, `CITATION.cff`) are shipped in
it (`shipped_documents`), their own links to files left behind made plain text.
"""
from __future__ import annotations

import json
import re
from pathlib import Path

from rasp.stop import rules_text

LIBRARY = "rasp-looped"             # our distribution's name on the package index (pyproject.toml)
LICENSE = "mit"                     # the hub's identifier of the project's license (LICENSE)
# export name -> source path (from the repository root) of the documents a card links to
DOCUMENTS = {"tasks.md": "docs/tasks.md", "LICENSE": "LICENSE", "CITATION.cff": "CITATION.cff"}
LINK = re.compile(r"\[([^\]]*)\]\(([^)\s]+)\)")


def _yaml(value) -> str:
    """A YAML scalar or flow collection: JSON's strings, numbers, lists and objects are YAML too."""
    return json.dumps(value)


# ---- the documents shipped beside the card --------------------------------------------------

def _repo() -> Path:
    from trainer.tasks.base import REPO       # where the task programs are read from, as the docs
    return REPO


def localize_links(text: str, source: str, shipped: set) -> str:
    """`text` (the document at `source`, a path from the repository root) with each
    relative link to a shipped document pointed at its name in the export, and each
    link to a file left behind written as its text and source path (no broken link)."""
    by_source = {src: name for name, src in DOCUMENTS.items() if name in shipped}

    def one(m):
        label, target = m.group(1), m.group(2)
        if ":" in target or target.startswith("#"):          # a URL or an anchor of this page
            return m.group(0)
        path, _, anchor = target.partition("#")
        resolved = str(Path(source).parent.joinpath(path)).replace("\\", "/")
        parts = []
        for part in resolved.split("/"):                     # normalise a/b/../c without touching the disk
            if part == "..":
                parts = parts[:-1]
            elif part not in ("", "."):
                parts.append(part)
        resolved = "/".join(parts)
        if resolved in by_source:
            return f"[{label}]({by_source[resolved]}{'#' + anchor if anchor else ''})"
        return f"{label} (`{resolved}` in the {LIBRARY} source)"
    return LINK.sub(one, text)


def shipped_documents(kind: str) -> dict:
    """{export name: bytes} of the documents a card links to, read from the source
    checkout; one that is absent there (an install without the docs) is left out,
    and the card then names it without a link."""
    root, found = _repo(), {}
    for name, src in DOCUMENTS.items():
        if (root / src).is_file():
            found[name] = (root / src).read_bytes()
    for name, src in DOCUMENTS.items():
        if name.endswith(".md") and name in found:
            found[name] = localize_links(found[name].decode("utf-8"), src, set(found)).encode("utf-8")
    return found


def _ref(name: str, shipped) -> str:
    return f"[{name}]({name})" if name in shipped else f"`{DOCUMENTS[name]}` of the {LIBRARY} source"


# ---- front matter ---------------------------------------------------------------------------

def pipeline_tag(kind: str, model) -> str:
    """The hub's standard task name for what the model does.  A Fan-task model reads the
    whole input in one pass and predicts a token at each answer position, like a tagger:
    token-classification; an NTP baseline decodes its answer token by token:
    text-generation.  A comparison model labels every position (token-classification) or
    the whole input (ListOps, Logic: text-classification)."""
    if kind == "fan":
        return "text-generation" if model.spec.objective == "ntp" else "token-classification"
    return "token-classification" if model.task.kind == "per_position" else "text-classification"


def _model_index(name: str, task: str, evals, kind: str, tag: str) -> list:
    """model-index of the evaluations; the dataset is named as what it is, the task's own
    generator (there is no hub dataset: inputs are drawn online, seeded as given)."""
    results = []
    for _file, doc in evals:
        if kind == "fan":
            from trainer.fan.evalfile import FAN_SPLIT
            m = doc.get("splits", {}).get(FAN_SPLIT, {}).get("metrics", {}).get("exact_match", {})
            lengths = doc["splits"][FAN_SPLIT]["params"]["lengths"] if m else []
            if m.get("mean") is not None:
                results.append(("exact_match", m["mean"], f"exact match, lengths {min(lengths)}-{max(lengths)}, "
                                                          f"stop {doc.get('stop')}", "test",
                                {"lengths": f"{min(lengths)}-{max(lengths)}", "seed": doc.get("seed")}))
        else:
            head = doc.get("headline")
            for split, entry in doc["splits"].items():
                v = entry["metrics"].get(head, {}).get("mean")
                if v is not None:
                    results.append((head, v, f"{head}, split {split}", split, {"seed": doc.get("seed")}))
    if not results:
        return []
    out = ["model-index:", f"- name: {_yaml(name)}", "  results:"]
    for metric, value, label, split, args in results:
        out += ["  - task:", f"      type: {_yaml(tag)}", f"      name: {_yaml(task)}",
                "    dataset:", f"      type: {_yaml(task + '-generator')}",
                f"      name: {_yaml(f'{task}, generated by the {LIBRARY} task generator (not a hub dataset)')}",
                f"      split: {_yaml(split)}", f"      args: {_yaml(args)}",
                "    metrics:", f"    - type: {_yaml(metric)}", f"      value: {round(float(value), 4)}",
                f"      name: {_yaml(label)}"]
    return out


# ---- the card -------------------------------------------------------------------------------

def _example(model, kind: str):
    """An input from the task's own generator (seed 0) and the model's answer."""
    import numpy as np
    rng = np.random.default_rng(0)
    if kind == "fan":
        data = model.data
        n = max(data.task.min_n, min(3, model.hp.max_train_n))
        text = model.program.format_output(data.sample_inputs(rng, [n], train=False)[0])
    else:
        task = model.task
        examples = task.generate(rng, task.splits[model.hp.valid_split].params, 20)
        ex = min(examples, key=lambda e: len(e.input) + len(e.input2 or []))
        words = [task.vocab[i - 1] for i in ex.input][:16 if task.kind == "per_position" else None]
        text = " ".join(words)
        if ex.input2 is not None:
            text += " | " + " ".join(task.vocab[i - 1] for i in ex.input2)
    return text, model([text])


def _fan_tables(evals) -> list:
    from trainer.fan.evalfile import describe_inputs, rows
    out = []
    for name, doc in evals:
        lo, hi = doc.get("train_range") or (None, None)
        out += [f"`{name}`: stopping rule **{doc.get('stop')}**"
                + (f" (threshold {doc['threshold']})" if doc.get("threshold") else "")
                + f", seed {doc.get('seed')}; * = inside the training range ({lo}..{hi}); "
                "|step − T(n)|: how far the rule's step is from T(n); at T(n): the exact match at T(n)"
                + (f"; inputs: {describe_inputs(doc['inputs'], rows(doc))}" if doc.get("inputs") else ""), "",
                "| length | exact match | ± s.e. | inputs | chosen step | T(n) | abs(step − T(n)) | at T(n) |",
                "|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in rows(doc):
            mark = "*" if hi is not None and r["length"] <= hi else ""
            at_t = r.get("oracle_exact_match", r["exact_match"] if doc.get("stop") == "oracle" else None)
            se = "—" if r.get("se") is None else f"{r['se']:.3f}"      # None: each input scored once
            out.append(f"| {r['length']}{mark} | {r['exact_match']:.3f} | {se} | {r['n']} | "
                       f"{r.get('chosen_step', float('nan')):.1f} | {r.get('oracle_step', float('nan')):.1f} | "
                       f"{r.get('step_error', float('nan')):.2f} | {'—' if at_t is None else f'{at_t:.3f}'} |")
        out.append("")
    return out


def _seq_tables(evals) -> list:
    out = []
    for name, doc in evals:
        splits = doc["splits"]
        metrics = list(next(iter(splits.values()))["metrics"]) if splits else []
        out += [f"`{name}`: seed {doc.get('seed')}, headline metric **{doc.get('headline')}**", "",
                "| split | examples | " + " | ".join(f"{m} ± s.e." for m in metrics) + " |",
                "|---|---:|" + "---:|" * len(metrics)]
        for split, entry in splits.items():
            cells = []
            for m in metrics:
                v = entry["metrics"].get(m, {})
                cells.append("—" if v.get("mean") is None else f"{v['mean']:.3f} ± {v.get('se') or 0:.3f}")
            out.append(f"| {split} | {entry.get('n')} | " + " | ".join(cells) + " |")
        out.append("")
    return out


def _mean(rows, key="exact_match"):
    total = sum(r["n"] for r in rows)
    return sum(r[key] * r["n"] for r in rows) / total if total else None


def _reached(hp: dict, step) -> int:
    """The longest training length the curriculum had reached by `step`."""
    return min(hp["start_n"] + int(step or 0) // hp["interval"], hp["max_train_n"])


def _training_data(run: dict, kind: str, model, step, shipped) -> list:
    hp = run["hparams"]
    if kind == "fan":
        task = model.data.task
        reached = _reached(hp, step)
        return [f"Generated online, not a stored dataset: inputs drawn by the task's generator "
                f"(`{task.name}`: {task.description.replace(' (docs/tasks.md)', '')}; see "
                f"{_ref('tasks.md', shipped)}), their answers and loop counts T(n) computed by running "
                "`program.rasp`.", "",
                f"- lengths: n from {task.min_n} to the curriculum's longest, which starts at {hp['start_n']} and "
                f"grows by 1 every {hp['interval']} steps up to {hp['max_train_n']} (reached {reached} by step "
                f"{step}); each sample draws its own length", f"- seed: {hp['seed']} (the batches are a function of "
                "the seed and the step)", ""]
    task = model.task
    if run.get("data"):
        return [f"The examples of the file `{Path(run['data']).name}` (written by `rasp data {task.name}`); "
                f"seed {hp['seed']}.", ""]
    split = task.splits[hp["train_split"]]
    return [f"Generated online, not a stored dataset: the `{hp['train_split']}` split of the task's generator "
            f"({_yaml(split.params)}; {split.description}), seed {hp['seed']}.", ""]


def _limitations(run: dict, kind: str, model, evals, step) -> list:
    out = [f"A research model of one task, {run['task']}: it answers inputs in the task's format only (others are "
           "refused with a located error), and nothing is promised beyond the figures below.", ""]
    if kind == "fan":
        from trainer.fan.coverage import run_coverage
        from trainer.fan.evaluate import rows
        hp = run["hparams"]
        reached = _reached(hp, step)
        out.append(f"- trained on lengths {model.data.task.min_n}..{reached}"
                   + (f" (the curriculum would have gone on to {hp['max_train_n']})" if reached < hp["max_train_n"]
                      else ""))
        note = run_coverage(run, step)[1]       # a fine-tuned compiled start's sizes no input had
        if note:
            out.append(f"- {note}")
        for name, doc in evals:
            rs = rows(doc)
            lo, hi = doc.get("train_range") or (model.data.task.min_n, hp["max_train_n"])
            inside, beyond = [r for r in rs if r["length"] <= hi], [r for r in rs if r["length"] > hi]
            line = f"- `{name}` (tested on lengths {min(r['length'] for r in rs)}..{max(r['length'] for r in rs)}):"
            if inside:
                line += f" exact match {_mean(inside):.3f} inside the training range"
            if beyond:
                worst = min(beyond, key=lambda r: r["exact_match"])
                line += (f", {_mean(beyond):.3f} beyond it (lowest {worst['exact_match']:.3f} at length "
                         f"{worst['length']})")
            out.append(line)
            rule = doc.get("stop")
            if rule == "oracle":
                out.append("  - stopping rule oracle: exactly T(n) iterations, computed from the input by the "
                           "task program (not by the model)")
            else:
                err = _mean(rs, "step_error") if all("step_error" in r for r in rs) else None
                at_t = _mean(rs, "oracle_exact_match") if all("oracle_exact_match" in r for r in rs) else None
                out.append(f"  - stopping rule {rule}'s own accuracy: its step is on average "
                           + ("?" if err is None else f"{err:.2f}") + " iterations from T(n); exact match "
                           + f"{_mean(rs):.3f} with the rule against "
                           + ("?" if at_t is None else f"{at_t:.3f}") + " at T(n)")
    else:
        out.append(f"- trained on the split `{run['hparams']['train_split']}`")
        for name, doc in evals:
            head = doc.get("headline")
            figures = ", ".join(f"{split} {entry['metrics'][head]['mean']:.3f}"
                                for split, entry in doc["splits"].items()
                                if entry["metrics"].get(head, {}).get("mean") is not None)
            out.append(f"- `{name}`: {head} by split: {figures}")
        out.append("- the model runs its own settings (iterations, tolerances); no stopping rule is chosen")
    if not evals:
        out.append("- not evaluated at the exported step: no figures (`rasp eval RUN`, then export again)")
    return out + [""]


def _citation(kind: str, shipped) -> list:
    fan = ("@inproceedings{fan2025looped,\n  title = {Looped Transformers for Length Generalization},\n"
           "  author = {Fan, Ying and Du, Yilun and Ramchandran, Kannan and Lee, Kangwook},\n"
           "  booktitle = {ICLR}, year = {2025}, note = {arXiv:2409.15647}\n}")
    ours = ("@software{rasp_looped,\n  title = {rasp-looped: n-RASP-L programs, their compiler to looped "
            "transformers, and a trainer},\n  author = {{the rasp authors}}, license = {MIT}\n}")
    return ["## Citation", "", f"The software ({_ref('CITATION.cff', shipped)} lists it and every paper whose "
            "methods it implements)" + (", and the paper whose tasks and recipe this model follows:" if kind == "fan"
                                        else ":"), "", "```bibtex", ours] + ([fan] if kind == "fan" else []) + \
        ["```", "", f"License: MIT ({_ref('LICENSE', shipped)})."]


def summary_lines(summary: dict, run: dict) -> list:
    """The card's lines on how training went (summary.json)."""
    body = [f"- steps: {summary.get('step')} of {run['hparams'].get('steps')}"
            + (" (finished)" if summary.get("finished") else " (not finished)"),
            f"- time: {summary.get('seconds', float('nan')):.1f} s on {run.get('device', '?')}"
            + (f" x {run['world_size']}" if run.get("world_size", 1) > 1 else "")]
    if summary.get("stopped"):
        body.append(f"- stopped early: {summary['stopped']}")
    if summary.get("final_loss") is not None:
        body.append(f"- final training loss: {summary['final_loss']:.4g}")
    if summary.get("final_eval"):
        body.append(f"- final evaluation during training: {summary['final_eval']}")
    return body


def evaluation_lines(name: str, doc: dict, kind: str) -> list:
    """One evaluation file's table and model-index entry, as the card renders them
    (trainer/trained/export.py leaves out a file that does not render)."""
    tables = _fan_tables if kind == "fan" else _seq_tables
    return tables([(name, doc)]) + _model_index("", "", [(name, doc)], kind, "")


def model_card(run: dict, kind: str, model, config: dict, summary, evals, plots, folder: str, shipped) -> str:
    from trainer.models import get_encoder_spec, get_model_spec
    from trainer.tasks.program import task_of
    task, name, init = run["task"], run["model"], run["init"]
    what = (get_model_spec(name) if kind == "fan" else get_encoder_spec(name)).description
    n_params = sum(p.numel() for p in model.module.parameters())
    tag = pipeline_tag(kind, model)
    tags = [LIBRARY, "rasp", "looped-transformer" if name.startswith("looped") else "sequence-model", task, name,
            "length-generalization" if kind == "fan" else "comparison-tasks"]
    front = ["---", f"license: {LICENSE}", f"library_name: {LIBRARY}", f"pipeline_tag: {tag}", "tags:",
             *[f"- {_yaml(t)}" for t in tags], *_model_index(f"{task}-{name}", task, evals, kind, tag), "---", ""]
    example, answer = _example(model, kind)
    description = task_of(run).description.replace("(docs/tasks.md)", f"({_ref('tasks.md', shipped)})")
    body = [f"# {task} / {name}", "",
            f"A model trained with {LIBRARY} (`rasp train`, {init} initialisation, preset `{run.get('preset')}`) "
            f"on the task **{task}**: {description}.", "",
            "## Use", "", f"Install the library (distribution `{LIBRARY}`, imported as `rasp`, command `rasp`) from "
            "its source checkout, then load this folder:", "", "```bash", "pip install -e .", "```", "",
            "```python", "import rasp", f"model = rasp.load({_yaml(folder)})",
            f"model([{_yaml(example)}])     # -> {answer!r}", "```", "",
            f'or `rasp run {folder} --input "{example}"` (one input per line with `--inputs FILE`).  '
            "`print(model)` names the task, size and stopping rule.", ""]
    if kind == "fan":
        rule = config.get("stop")
        body += ["The input is parsed by the task's program (`program.rasp`), which checks its `require` "
                 "contract and gives the loop count T(n); the answer is the model's output from `>` on."
                 + (f" The loop stops by the rule **{rule}** (`--stop` or `rasp.load(..., stop=...)` chooses "
                    f"{rules_text()})." if rule else
                    " This model runs a fixed number of iterations."), ""]
        read = ((config.get("halting") or {}).get("record") or {}).get("head") or {}
        if rule == "head" and read.get("reads") in ("clock", "program"):      # a compiled start's head
            from trainer.fan.evaluate import head_reads
            body += [head_reads(read) + ".", ""]
    else:
        body += [("The answer is one label per input position." if model.task.kind == "per_position" else
                  "The answer is one label for the input.")
                 + (" A pair is two sentences separated by `|`." if model.task.kind == "pair" else ""), ""]
    body += ["## Model", "", f"- **{name}**: {what}", f"- parameters: {n_params:,}",
             f"- initialisation: {init}" + (f", compressed to width {run['compress']} ({run.get('compress_method')})"
                                           if run.get("compress") else ""),
             "- files: `config.json` (this run's settings and the model's configuration), `model.safetensors` "
             "(weights), `vocab.json` (model ids -> tokens)"
             + (", `program.rasp` (the task program)" if kind == "fan" else "")
             + ", `manifest.json` (SHA-256 of the model files, checked on loading)", ""]
    body += ["## Training data", "", *_training_data(run, kind, model, config["step"], shipped)]
    body += ["## Training", ""]
    if summary:
        body += summary_lines(summary, run)
    else:
        body.append(f"- exported at step {config['step']} (the run has no summary.json: it was not finished)")
    body += [f"- base recipe: preset `{run.get('preset')}`, {init} start, seed {run['hparams'].get('seed')}; the "
             "flags given override it", "",
             "The recipe, every hyper-parameter (`config.json` keeps them under `run.hparams`):", "",
             "| hyper-parameter | value |", "|---|---|"]
    body += [f"| `{k}` | `{json.dumps(v, sort_keys=True)}` |" for k, v in sorted(run["hparams"].items())]
    body.append("")
    if "train_curves.png" in plots:
        body += ["![training curves](train_curves.png)", ""]
    body += ["## Evaluation", ""]
    if evals:
        body += _fan_tables(evals) if kind == "fan" else _seq_tables(evals)
        body += [f"![{p}]({p})" for p in plots if p != "train_curves.png"] + [""]
        body.append("Made by `rasp eval` (inputs from the task's own generator, seeded as shown).")
    else:
        body.append(f"Not evaluated at step {config['step']} (`rasp eval RUN` before exporting adds the table).")
    body += ["", "## Intended use and limitations", "", *_limitations(run, kind, model, evals, config["step"])]
    body += _citation(kind, shipped)
    return "\n".join(front + body) + "\n"
