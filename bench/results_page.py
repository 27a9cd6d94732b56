"""docs/results.md from the committed result folders, in one command.

A result folder is what `rasp compare` left in its --out directory, less the
checkpoints: compare.json, speeds.json and, per run, run.json, summary.json,
compare_run.json, failed.json and the eval files (`--collect` copies exactly
these).  They live in docs/results/<suite>/; this script rebuilds each
folder's report (report.md, report.json, plots/) with `rasp compare
--report`'s code, checks it with bench/check_compare_report.py, and writes
docs/results.md: a contents list, the claims across suites, then per suite
one heading with, in order, what was run (from the runs' records and the
"## Run" bullets of docs/results/<suite>/notes.md), the summary, the tables
(at most 12 columns each, split by task where wider; budget marks, anomaly
flags and plots beside each), a rerun where there is one, and the notes
(the "## Notes" bullets).  A rerun of a suite from another first seed (`rasp
compare SUITE --first-seed S`) is collected into docs/results/reruns/<suite>/;
the page tests each one against the suite's stated uncertainty with
bench/check_rerun.py.
The same command regenerates the bench pages drawn from these folders
(bench/recurrent_transformers.md, bench/linear_recurrence.md; BENCH_PAGES).

    python -m bench.results_page                       # regenerate docs/results.md, the reports and the bench pages
    python -m bench.results_page --check               # exit 1 if a page differs from a regeneration
    python -m bench.results_page --collect runs/fan    # copy a run folder's results into docs/results/fan
"""
from __future__ import annotations

import argparse
from collections import Counter
import json
import os
import re
import shutil
import stat
import sys
import tempfile
from pathlib import Path

from rasp.atomic import write_bytes_atomic, write_text_atomic
from rasp.errors import RaspError, RaspFileError
from rasp.readfile import read_bytes, read_json, read_text
from bench import check_rerun, linear_recurrence, recurrent_transformers
from bench.check_compare_report import check as check_report
from trainer.compare import markdown as M
from trainer.compare import report as R
from trainer.compare.estimate import duration, load_range
from trainer.compare.suite import available_suites

ROOT = Path(__file__).resolve().parents[1]

RESULTS = ROOT / "docs" / "results"
RERUNS = "reruns"           # docs/results/reruns/<suite>: the same suite from another first seed
PAGE = ROOT / "docs" / "results.md"
RUN_FILES = ("run.json", "summary.json", "compare_run.json", "failed.json")     # and the eval files
DIR_FILES = (R.MANIFEST, "speeds.json")
FOLDER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
GENERATED_BY = "`python -m bench.results_page`"
# the bench pages tabulated from the same folders: file name -> (result folders, the page as committed) -> text
# (the suite reports `regenerate` built are passed on as `report`: the runs are read once)
BENCH_PAGES = {
    "recurrent_transformers.md": lambda root, old, report: recurrent_transformers.render(
        root, recurrent_transformers.kept_part(old), report=report),
    "linear_recurrence.md": lambda root, old, report: linear_recurrence.render(root, report=report),
}


def result_folders(root: Path = RESULTS) -> list:
    folders = sorted(p for p in Path(root).iterdir() if (p / R.MANIFEST).is_file()) if Path(root).is_dir() else []
    for p in folders:           # its report is written into it: through a link, that is outside the results
        if p.is_symlink():
            raise RaspFileError(p, "is a link: a result folder must be a folder here (move the link away)")
    return folders


def collect(run_folder: Path, dest: Path) -> int:
    """Copy the small files of a `rasp compare` output directory (no
    checkpoints, no logs); returns the number of runs copied.  Everything is
    read and checked before the first write: a refused collect changes nothing."""
    run_folder, dest = Path(run_folder), Path(dest)
    manifest = R.read_manifest(run_folder)
    for sel in manifest["suites"].values():      # the suite by name: a path on another machine means nothing here
        sel["file"] = sel["suite"]
    files = {R.MANIFEST: json.dumps(manifest, indent=1).encode("utf-8")}
    if os.path.lexists(run_folder / "speeds.json"):
        files["speeds.json"] = read_bytes(run_folder / "speeds.json")
    n = 0
    # a run `rasp compare` set aside as stale (RUN.staleK) is history, not a result; a link is not a run of this folder
    for run in sorted(p for p in run_folder.iterdir() if p.is_dir() and not p.is_symlink()
                      and not re.search(r"\.stale\d+$", p.name)
                      and ((p / "run.json").is_file() or (p / "failed.json").is_file())):
        for f in sorted(run.iterdir()):
            if f.is_file() and not f.is_symlink() and (f.name in RUN_FILES or re.fullmatch(r"eval[\w.-]*\.json", f.name)):
                files[f"{run.name}/{f.name}"] = read_bytes(f)
        n += 1
    _check_dest(run_folder, dest, files)
    dest.mkdir(parents=True, exist_ok=True)
    for name, data in files.items():
        (dest / name).parent.mkdir(exist_ok=True)
        write_bytes_atomic(dest / name, data)
    return n


def _check_dest(src: Path, dest: Path, files: dict):
    """Refuse a destination that is the source (or inside it, or holds it), a
    link, or a folder that is not a result folder; and any link or non-file
    where a file or a run's folder goes (written through, it would change a
    file outside, or a user's)."""
    a, b = src.resolve(), dest.resolve()
    if a == b or a in b.parents or b in a.parents:
        raise RaspFileError(dest, f"is {'the folder collected' if a == b else 'inside or around the folder collected'}"
                                  f" ({src}): collect into another folder")
    for p in (dest, dest.parent) if dest.parent.name == RERUNS else (dest,):
        if p.is_symlink():
            raise RaspFileError(p, "is a link: collect into a folder, not through a link")
    if dest.exists():
        if not dest.is_dir():
            raise RaspFileError(dest, "is not a folder")
        if any(dest.iterdir()) and not (dest / R.MANIFEST).is_file():
            raise RaspFileError(dest, f"is not empty and holds no {R.MANIFEST}: not a result folder "
                                      "(collect into a new folder, or an earlier result folder)")
    for name in files:
        path = dest / name
        for p in ([path.parent] if path.parent != dest else []) + [path]:
            if p.is_symlink() or (p.exists() and not (p.is_dir() if p != path else p.is_file())):
                raise RaspFileError(p, "is a link or not a plain " + ("file" if p == path else "folder")
                                    + " (planted?): move it away, then collect again")


def _wall(folder: Path, suite: dict) -> str:
    """The seconds the runs' commands took and the load around them, from
    their compare_run.json records."""
    secs, loads = 0.0, []
    for r in suite["run_status"]:
        path = folder / r["run_id"] / "compare_run.json"
        try:
            rec = read_json(path, finite=True)
        except RaspFileError:
            continue
        steps = rec.get("steps", []) if isinstance(rec, dict) else []
        for i, s in enumerate(steps if isinstance(steps, list) else []):
            v = s.get("seconds", 0) if isinstance(s, dict) else 0
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
                raise RaspFileError(path, f"steps[{i}].seconds: expected a number of seconds, got {json.dumps(v)[:40]}")
            secs += v
        loads += [x for x in (rec.get("load"), rec.get("load_end")) if isinstance(x, (int, float))
                  and not isinstance(x, bool)]
    if not secs:
        return "not recorded | —"
    return f"{duration(secs)} | " + (load_range(loads) if loads else "not recorded")


def read_notes(folder: Path) -> dict:
    """A folder's notes.md as {section: [bullet texts]}: "## Run" (how it was run, shown under the suite's
    heading) and "## Notes" (what the tables support and what they do not, shown after the tables); a bullet
    is a line starting "- " and the indented lines after it."""
    path = Path(folder) / "notes.md"
    out: dict = {}
    if not path.is_file():
        return out
    section = None
    for line in read_text(path).splitlines():
        if line.startswith("## "):
            section = out.setdefault(line[3:].strip(), [])
        elif section is None or not line.strip():
            continue
        elif line.startswith("- "):
            section.append(line[2:].strip())
        elif section:
            section[-1] += " " + line.strip()
        else:
            raise RaspFileError(path, f"text before the first bullet of a section: {line[:60]!r}")
    return out


def _seeds_text(s: dict) -> str:
    first = s.get("first_seed", 0)
    text = f"{s['seeds']} ({first}-{first + s['seeds'] - 1})" if s["seeds"] > 1 else f"1 (seed {first})"
    return text + "".join(f"; {k} {label}" for k, label in M.seed_groups(s.get("seeds_by_model") or {}))


def _steps_text(s: dict) -> str:
    """"800 (Implicit Llama: 6000)": the steps most models trained, and the others'."""
    by = {k: "/".join(map(str, v["steps"])) for k, v in (s.get("budget_by_model") or {}).items() if v["steps"]}
    if not by:
        return "not recorded"
    usual = Counter(by.values()).most_common(1)[0][0]
    rest = [f"{k}: {v}" for k, v in by.items() if v != usual]
    return usual + (f" (other models: {'; '.join(rest)})" if rest else "")


def run_items(folder: Path, s: dict, notes: dict) -> list:
    """The "what was run" list: the runs, seeds, steps, time and load from the runs' records, then the
    notes' own items (command, machine, dates)."""
    runs = ", ".join(f"{v} {k}" for k, v in s["runs"].items())
    time, load = _wall(folder, s).split(" | ")
    return [f"Runs: {runs} (suite `{s['suite']}`, preset `{s['preset']}`).",
            f"Seeds: {_seeds_text(s)}.", f"Training steps: {_steps_text(s)}.",
            f"Time: {time} of run commands; 1-minute load {load}."] + notes.get("Run", [])


def _place_plots(tables: list, plots: list) -> dict:
    """{table index: [plots]}: each plot after the first table that reads its task and split, else its task."""
    out: dict = {}
    for p in plots:
        reads = [(i, {((c.get("attrs") or {}).get("task"), (c.get("attrs") or {}).get("split"))
                      for r in t["rows"] for c in r["cells"]}) for i, t in enumerate(tables)]
        at = next((i for i, x in reads if (p.get("task"), p.get("split")) in x),
                  next((i for i, x in reads if p.get("task") in {k[0] for k in x}), len(tables) - 1))
        out.setdefault(at, []).append(p)
    return out


def suite_section(folder: Path, doc: dict, page_dir: Path, rerun: list = ()) -> list:
    """One result folder on the page: per suite, its heading, what was run, the summary, the tables (each
    with its marks, flags and plots), the rerun, then the notes."""
    rel = Path(os.path.relpath(Path(folder).resolve(), Path(page_dir).resolve())).as_posix()
    notes = read_notes(folder)
    lines = []
    for s in doc["suites"]:
        name = s["suite"]
        lines += [f"## {s['title']}: suite `{name}`", "", f"### {name}: what was run", "",
                  *M.bullets(run_items(folder, s, notes)), ""]
        lines += M.summary_markdown(s, "###", title=f"{name}: summary", width=True)
        if s.get("note"):
            lines += [*M.wrap(s["note"]), ""]
        shown = [t for t in s["tables"] if t["selected"] or t["published_only"]]
        plots = [{**p, "path": f"{rel}/{p['path']}"} for p in s.get("plots", [])]
        placed = _place_plots(shown, plots) if shown else {}
        for i, t in enumerate(shown):
            lines += M.page_table(t, "###", placed.get(i, []))
        lines += M.unrun_and_failed(s, M.wrap)
    lines += list(rerun)
    if notes.get("Notes"):
        lines += [f"### {doc['suites'][0]['suite']}: notes", "", *M.bullets(notes["Notes"]), ""]
    return lines


def seed_range(doc: dict) -> str:
    """"seeds 0-2" of a folder's report (its first suite's range)."""
    s = doc["suites"][0]
    first = s.get("first_seed", 0)
    return f"seeds {first}-{first + s['seeds'] - 1}" if s["seeds"] > 1 else f"seed {first}"


def rerun_lines(folder: Path, doc: dict, stated: dict) -> list:
    """One rerun tested against its suite's stated uncertainty (bench/check_rerun.py)."""
    name = Path(folder).name
    notes = read_notes(folder)
    lines = [f"### {name}: rerun from {seed_range(doc)}", ""]
    items = [f"Tested against the {seed_range(stated)} above with `python -m bench.check_rerun` (its docstring "
             "gives the test)."] + notes.get("Run", [])
    lines += [*M.bullets(items), ""]
    try:
        result = check_rerun.check(stated, doc)
    except check_rerun.ReportError as e:
        raise RaspFileError(folder, f"its report: {e}") from None
    for line in check_rerun.render(result).splitlines():
        lines += [line] if line.startswith("|") or not line.strip() else M.wrap(line)
    return lines + [""] + ([*M.bullets(notes["Notes"]), ""] if notes.get("Notes") else [])


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def contents(lines: list) -> list:
    """The contents list: every H2 heading, its H3s under it."""
    out = ["## Contents", ""]
    for line in lines:
        m = re.match(r"^(##|###) (.*)$", line)
        if m:
            out.append(("" if m.group(1) == "##" else "  ") + f"- [{m.group(2)}](#{anchor(m.group(2))})")
    return out + [""]


INTRO = ("Generated by {gen} from the result folders in [results/](results/) (each run's settings, summary and "
         "evaluation files; no checkpoints): do not edit by hand, edit the suites, run them, `--collect` the folder "
         "and regenerate.  Every figure below is a mean over seeds with its standard error and seed count.  Each "
         "suite's summary ranks the models per range and tests the margin between the best two with a one-sided "
         "Welch t-test over seeds, adjusted for the number of margins tested in the suite (Holm–Bonferroni); a "
         "margin is a claim only where the adjusted p ≤ 0.05 and the margin is at least 0.01 (1 point on a percent "
         "table).  Rows trained with other steps, width or seeds than most rows of their table are marked "
         "{mark}, and the page flags results that contradict the tables' own order of difficulty or rest on "
         "one seed far above the others.  To test a suite's stated uncertainty with seeds it never saw, rerun it "
         "from another first seed into a folder of its own and compare: `rasp compare SUITE --first-seed 100 --out "
         "runs/SUITE_rerun`, then `python -m bench.check_rerun docs/results/SUITE runs/SUITE_rerun`.")


def page(folders: list, docs: list, page_dir: Path, reruns: list = ()) -> str:
    head = ["# Results: `rasp compare` reports", "",
            *M.wrap(INTRO.format(gen=GENERATED_BY, mark=M.BUDGET_MARK)), "", *M.wrap(M.LEGEND), ""]
    lines = ["## Across suites", "",
             M.md_row(["suite", "preset", "seeds", "runs", "ranges ranked", "margins tested", "claims", "flags",
                       "run time", "load (1 min)"]), "|" + "---|" * 10]
    claims = []
    for folder, doc in zip(folders, docs):
        for s in doc["suites"]:
            summ = s["summary"]
            rows = summ["rows"]
            claims += [(s["suite"], r) for r in rows if r["beyond_noise"] and not r.get("same_as")]
            runs = ", ".join(f"{v} {k}" for k, v in s["runs"].items())
            ranked = "none: needs the paper preset" if summ.get("withheld") else str(len(rows))
            flags = sum(len(t.get("anomalies", [])) for t in s["tables"])
            lines.append(M.md_row([s["suite"], s["preset"], str(s["seeds"]), runs, ranked, str(summ.get("family", 0)),
                                   str(summ.get("claims", 0)), str(flags), *_wall(folder, s).split(" | ")]))
    ran = {s["suite"] for doc in docs for s in doc["suites"]}
    absent = [name for name in available_suites() if name not in ran]
    if absent:
        lines += ["", *M.wrap("Not rerun with seeds at this code, so not reported here (their last single-seed "
                              "reports are in the history of this page): "
                              + ", ".join(f"`{n}`" for n in absent) + ".")]
    lines += ["", *M.wrap("Claims (the margins that stay beyond noise after the correction; each suite's "
                          "summary gives every range tested, its raw and adjusted p):"), ""]
    if claims:
        head_row = ["suite", "table", "range", "best", "second", "margin", "p", "p (Holm)", "budget"]
        lines += [M.md_row(head_row), "|" + "---|" * len(head_row)]
        shown = None
        for suite, r in claims:
            cells = M.summary_row_cells(r)
            cells[0], shown = ("" if (suite, cells[0]) == shown else cells[0]), (suite, cells[0])
            lines.append(M.md_row([suite, *cells[:7], f"{M.BUDGET_MARK} {r['budget']}" if r.get("budget") else "equal"]))
    else:
        lines.append("None: no range separates its best model from the second beyond seed noise.")
    lines.append("")
    stated = {Path(f).name: d for f, d in zip(folders, docs)}
    by_suite = {Path(f).name: rerun_lines(f, d, stated[Path(f).name]) for f, d in reruns if Path(f).name in stated}
    orphans = [f"Rerun {Path(f).name}: no result folder results/{Path(f).name} to test it against."
               for f, _ in reruns if Path(f).name not in stated]
    lines += [*M.bullets(orphans), ""] if orphans else []
    for folder, doc in zip(folders, docs):
        lines += suite_section(folder, doc, page_dir, by_suite.get(Path(folder).name, [])) + [""]
    text = "\n".join(head + contents(lines) + lines)
    return re.sub(r"\n{3,}", "\n\n", text).rstrip() + "\n"


def regenerate(root: Path, page_path: Path, plots: bool = True, work: Path = None, keep: dict = None) -> tuple:
    """Rebuild every folder's report (in `work`, a copy of `root`, when given:
    the committed reports stay as they are); (page text, check problems).
    `keep` receives the full suite reports by (folder name, suite, preset)."""
    problems = []

    def build(folder: Path, plots: bool, keep: dict = None) -> dict:
        name = Path(folder).relative_to(root).as_posix()
        built = Path(work) / name if work else folder
        suites: dict = {}
        doc = R.write_report(built, plots=plots, keep=suites)
        if keep is not None:
            keep.update({(folder.name, *k): v for k, v in suites.items()})
        problems.extend(f"{name}: {p}" for p in check_report(built))
        return doc
    folders, reruns = result_folders(root), result_folders(Path(root) / RERUNS)
    docs = [build(f, plots, keep) for f in folders]
    # a rerun is tested on the page, not shown: no plots, and no bench page reads it
    reruns = [(f, build(f, False)) for f in reruns]
    return page(folders, docs, Path(page_path).parent, reruns), problems


def bench_pages(root: Path, bench_dir: Path, built: dict = None) -> dict:
    """{page path: (committed text, regenerated text)} for BENCH_PAGES; `built`:
    suite reports already made by `regenerate` (folder name, suite, preset)."""
    built = built or {}

    def report(folder: Path, suite: str, preset: str):
        done = built.get((Path(folder).name, suite, preset)) if Path(folder).parent == Path(root) else None
        return done if done is not None else R.folder_suite_report(folder, suite, preset)
    out = {}
    for name, render in BENCH_PAGES.items():
        path = Path(bench_dir) / name
        old = read_text(path) if path.is_file() else ""
        out[path] = (old, render(Path(root), old, report))
    return out


def _special(folder, names) -> list:
    """The names in `folder` that are neither links, regular files nor folders (FIFOs, devices)."""
    kinds = {n: os.lstat(os.path.join(folder, n)).st_mode for n in names}
    return [n for n, m in kinds.items() if not (stat.S_ISLNK(m) or stat.S_ISREG(m) or stat.S_ISDIR(m))]


def main(argv=None) -> int:
    try:
        return _main(argv)
    except RaspError as e:
        print(e.format(), file=sys.stderr)
        return 2


def _main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS), help="the folder of result folders (default: docs/results)")
    ap.add_argument("--page", default=str(PAGE), help="the page to write (default: docs/results.md)")
    ap.add_argument("--bench-dir", default=None, help="where the bench pages are (default: bench/ beside the "
                    "page's docs/ folder, i.e. the repository's bench/ for docs/results.md)")
    ap.add_argument("--check", action="store_true", help="compare the pages with a regeneration; write nothing")
    ap.add_argument("--collect", metavar="RUN_FOLDER", help="copy a rasp compare --out folder's results in")
    args = ap.parse_args(argv)
    root = Path(args.results)
    bench_dir = Path(args.bench_dir) if args.bench_dir else Path(args.page).resolve().parent.parent / "bench"
    if args.collect:
        src = Path(args.collect)
        if not (src / R.MANIFEST).is_file():
            print(f"{src}: no {R.MANIFEST} (not a rasp compare output directory)", file=sys.stderr)
            return 2
        selections = R.read_manifest(src)["suites"].values()
        suites = {sel["suite"] for sel in selections}
        name = suites.pop() if len(suites) == 1 else src.resolve().name
        if not FOLDER_NAME.fullmatch(name):       # a name read from a file, made a path: never ../ or a/b
            where = src / R.MANIFEST if len(suites) == 0 else src
            raise RaspFileError(where, f"suite name {name!r} cannot name a result folder "
                                       "(letters, digits, '_', '.', '-')")
        # a rerun from another first seed goes beside its suite's folder, never over it
        rerun = any(sel.get("first_seed", 0) for sel in selections)
        dest = (root / RERUNS if rerun else root) / name
        print(f"copied {collect(src, dest)} runs into {dest}")
        return 0
    folders = result_folders(root)
    if not folders:
        print(f"{root}: no result folders (a folder with {R.MANIFEST}); collect one with --collect RUN_FOLDER",
              file=sys.stderr)
        return 2
    if args.check:
        with tempfile.TemporaryDirectory() as scratch:
            # links stay links and anything but files and folders stays behind: the copy reads nothing endless
            shutil.copytree(root, Path(scratch) / "r", symlinks=True, ignore=_special)
            built: dict = {}
            text, problems = regenerate(root, Path(args.page), plots=False, work=Path(scratch) / "r", keep=built)
        committed = read_text(args.page) if Path(args.page).exists() else ""
        # the plots are not rebuilt here: their lines aside, the page must be the same
        strip = lambda t: re.sub(r"\n{3,}", "\n\n", re.sub(r"^!\[.*\]\(.*\)$", "", t, flags=re.M)).strip()  # noqa: E731
        stale = [args.page] if strip(committed) != strip(text) else []
        stale += [str(p) for p, (old, new) in bench_pages(root, bench_dir, built).items() if old != new]
        for p in problems:
            print(p)
        print(f"{args.page} and {len(BENCH_PAGES)} bench pages: "
              + (f"{', '.join(stale)} differ from a regeneration (run python -m bench.results_page)" if stale
                 else "match a regeneration") + f"; {len(problems)} report mismatches")
        return 1 if stale or problems else 0
    built = {}
    text, problems = regenerate(root, Path(args.page), keep=built)
    write_text_atomic(args.page, text)
    for path, (_, new) in bench_pages(root, bench_dir, built).items():
        path.parent.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, new)
    for p in problems:
        print(p)
    print(f"wrote {args.page} from {len(folders)} result folders, and {len(BENCH_PAGES)} bench pages "
          f"in {bench_dir}; {len(problems)} report mismatches")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
