"""Faults rerun by hand, as a user meets them: real `python -m rm ...` commands in subprocesses on tiny offline
runs, in a temporary folder made and removed here. Each must end in one line (`error: ...`, or one warning where rm
goes on), with nothing lost.

Items 1-11 are methods below; items 12-15 live in scripts/faults/ (one module each, `check(c, expect)`):
12 a prompt of thousands of turns under a memory cap (turns.py), 13 an overwrite beside the user's own files inside
rm's folders (overwrite.py), 14 one prompt in two subsets never on both sides of the hold-out (holdout.py), 15 a run
whose weights stay finite while its rewards do not (diverged.py).

    python scripts/fault_check.py            # every item (a few minutes on 2 CPU cores)
    python scripts/fault_check.py 4 10       # some items
    python scripts/fault_check.py --keep     # keep the temporary folder to look at afterwards

One line per item: `item N: ok — <what it saw>` or `item N: FAILED — <why>`; the exit status is 1 if any failed.

Item 9 (a full disk) mounts a small tmpfs in a private user and mount namespace (`unshare --user --map-root-user
--mount`: no root needed where unprivileged user namespaces are allowed), so the disk really is full (ENOSPC).
Where that is refused the check says so and fails rather than pretend: a per-file size limit (RLIMIT_FSIZE) fails
writes with EFBIG ("File too large"), which is not a full disk and which rm does not claim to handle.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUICKSTART = REPO / "configs" / "quickstart.yaml"
MARKER = "complete.json"  # rm.config.sealed.MARKER: written last, with each file's size and checksum
LOCK = ".rm.lock"  # rm.training.run_lock.LOCK
TINY = [
    "data.synthetic.n_train=96",
    "data.synthetic.n_eval=24",
    "model.random_init.hidden_size=32",
    "model.random_init.intermediate_size=64",
    "model.random_init.num_hidden_layers=1",
    "tokenizer.vocab_size=300",
    "train.batch_size=8",  # 12 micro-batches an epoch
    "train.eval_batch_size=24",
    "train.log_steps=1",
    "train.eval_steps=0",
    "train.report_to=[]",
    "train.num_threads=1",
]
SECRET = "s3cr3t-Pa55word"


class Failed(Exception):
    pass


def expect(condition: bool, why: str) -> None:
    if not condition:
        raise Failed(why)


class Checks:
    def __init__(self, root: Path):
        self.root = root
        self.env = os.environ | {
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "CUDA_VISIBLE_DEVICES": "",  # the CPU, on a GPU machine too
            "OMP_NUM_THREADS": "1",
            "HF_DATASETS_CACHE": str(root / "hf-cache"),  # never the user's ~/.cache
        }
        self._killed: Path | None = None

    # --- running rm as a user does ---------------------------------------------------------------------------
    def command(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "rm", *map(str, args)]

    def rm(self, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
        return subprocess.run(self.command(*args), cwd=REPO, env=self.env, capture_output=True, text=True,
                              timeout=timeout)  # fmt: skip

    def start(self, *args: str, log: str) -> subprocess.Popen:
        out = open(self.root / log, "w")  # noqa: SIM115 (the child writes it)
        return subprocess.Popen(self.command(*args), cwd=REPO, env=self.env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip

    def train(self, out: Path, *more: str) -> subprocess.CompletedProcess:
        return self.rm("train", QUICKSTART, *TINY, f"output_dir={out}", *more)

    # --- reading what it said --------------------------------------------------------------------------------
    @staticmethod
    def lines(text: str) -> list[str]:
        return [line for line in re.split(r"[\r\n]", text) if line.strip()]

    def one_line(self, proc: subprocess.CompletedProcess) -> str:
        """The one `error: ...` line of a refused command (progress bars aside), which must exit non-zero."""
        expect("Traceback" not in proc.stderr, f"a traceback: {proc.stderr[-600:]!r}")
        errors = [line[line.index("error: ") :] for line in self.lines(proc.stderr) if "error: " in line]
        expect(proc.returncode != 0, f"exit 0 ({proc.stdout[-300:]!r})")
        expect(len(errors) == 1, f"{len(errors)} error lines, rc {proc.returncode}: {proc.stderr[-600:]!r}")
        return errors[0]

    def ran(self, proc: subprocess.CompletedProcess, what: str) -> None:
        expect(proc.returncode == 0, f"{what}: exit {proc.returncode}: {proc.stderr[-600:]!r}")

    @staticmethod
    def files(folder: Path) -> dict[str, bytes]:
        return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}

    @staticmethod
    def steps(run: Path) -> list[int]:
        """The run's checkpoints that carry a completion marker, oldest first."""
        found = [int(p.parent.name[5:]) for p in (run / "checkpoints").glob(f"step-*/{MARKER}")]
        return sorted(found)

    @staticmethod
    def weights(path: Path) -> dict:
        from safetensors.torch import load_file

        return load_file(path)

    def wait_for(self, proc: subprocess.Popen, path: Path, log: str, seconds: float = 120) -> None:
        deadline = time.monotonic() + seconds
        while not path.exists():
            expect(proc.poll() is None, f"the run ended before {path.name}: {(self.root / log).read_text()[-500:]!r}")
            expect(time.monotonic() < deadline, f"no {path} after {seconds:.0f} s")
            time.sleep(0.005)

    # --- the items -------------------------------------------------------------------------------------------
    def item1(self) -> str:
        """A project folder with the user's own config.yaml and data/prefs.jsonl; train.overwrite=true."""
        proj = self.root / "proj"
        (proj / "data").mkdir(parents=True)
        rows = [{"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": "no"} for i in range(48)]
        (proj / "data" / "prefs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        config = QUICKSTART.read_text().replace("output_dir: runs/quickstart", f"output_dir: {proj}")
        config = config.replace("  source: synthetic", f"  source: {proj / 'data' / 'prefs.jsonl'}")
        (proj / "config.yaml").write_text(config)
        before = self.files(proj)
        said = []
        for more in ([], ["train.overwrite=true"]):
            said.append(self.one_line(self.rm("train", proj / "config.yaml", *TINY[2:], *more)))
            expect(self.files(proj) == before, f"the project folder changed: {sorted(self.files(proj))}")
        return f"refused with and without overwrite, data/prefs.jsonl kept: {said[-1]}"

    def item2(self) -> str:
        """A diverging run (train.lr=3e38, no warmup, a checkpoint every step), then `rm export` of it."""
        out = self.root / "diverged"
        line = self.one_line(self.train(out, "train.lr=3e38", "train.warmup_ratio=0", "train.save_steps=1",
                                        "train.max_steps=10"))  # fmt: skip
        expect("stopping at step" in line, f"not the divergence stop: {line}")
        kept = sorted((out / "checkpoints").glob("step-*")) if (out / "checkpoints").exists() else []
        for step in kept:
            bad = [k for k, v in self.weights(step / "model.safetensors").items() if not v.isfinite().all()]
            expect(not bad, f"{step.name} holds non-finite weights ({bad[0]})")
        export = self.one_line(self.rm("export", out, "--out", self.root / "diverged-export"))
        expect(not (self.root / "diverged-export").exists(), "an export folder was written")
        return f"{len(kept)} checkpoints kept, none non-finite; train: {line[:90]}…; export: {export}"

    def killed_run(self) -> Path:
        """A run SIGKILLed after its step-6 checkpoint (save_steps=2, all kept): what items 3, 5 and 6 damage."""
        if self._killed is None:
            out = self.root / "killed"
            proc = self.start("train", QUICKSTART, *TINY, "train.max_steps=40", "train.save_steps=2",
                              "train.save_total_limit=0", "export.enabled=false", f"output_dir={out}",
                              log="killed.log")  # fmt: skip
            try:
                self.wait_for(proc, out / "checkpoints" / "step-6" / MARKER, "killed.log")
            finally:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            expect(not (out / "eval.json").exists(), "the run finished before the kill")
            self._killed = out
        return self._killed

    def damaged_resume(self, item: int, harm: Callable[[Path], None], says: str, export: bool = False) -> str:
        out = self.root / f"item{item}"
        shutil.copytree(self.killed_run(), out)
        *_, previous, newest = self.steps(out)
        harm(out / "checkpoints" / f"step-{newest}")
        seen = ""
        if export:
            seen = self.one_line(self.rm("export", out, "--out", out / "export")) + "; "
            expect(f"step-{newest}" in seen and f"step-{previous}" in seen, f"export: {seen}")
            expect(not (out / "export").exists(), "export wrote a folder")
        proc = self.rm("train", out / "config.yaml", f"output_dir={out}", "train.resume=auto")
        self.ran(proc, "resume=auto")
        skips = [line for line in self.lines(proc.stderr) if "skipping" in line]
        expect(len(skips) == 1 and f"step-{newest}" in skips[0] and says in skips[0], f"said: {skips}")
        resumed = json.loads((out / "eval.json").read_text())["train"]["resumed_from"]
        expect(resumed.endswith(f"/step-{previous}"), f"resumed from {resumed}, not step-{previous}")
        return f"{seen}{skips[0][skips[0].index('resume: ') :]}; resumed from step-{previous}"

    def item3(self) -> str:
        """A save cut short while replacing step-N: state left, no weights, no marker."""

        def cut(step: Path) -> None:
            (step / "model.safetensors").unlink()
            (step / MARKER).unlink()

        return self.damaged_resume(3, cut, f"no {MARKER}")

    def item5(self) -> str:
        """Bits flipped inside the last tensor of model.safetensors (its header intact)."""

        def flip(step: Path) -> None:
            data = bytearray((step / "model.safetensors").read_bytes())
            data[-5:] = bytes(b ^ 0xFF for b in data[-5:])
            (step / "model.safetensors").write_bytes(bytes(data))

        return self.damaged_resume(5, flip, "checksum", export=True)

    def item6(self) -> str:
        """optimizer.bin cut to half its size (a disk that lost its tail)."""

        def truncate(step: Path) -> None:
            path = step / "optimizer.bin"
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])

        return self.damaged_resume(6, truncate, "optimizer.bin")

    def item4(self) -> str:
        """A second `rm train` (resume, then overwrite) on a run directory another one is training in."""
        out = self.root / "locked"
        first = self.start("train", QUICKSTART, *TINY, "train.max_steps=2000", "train.save_steps=20",
                           "export.enabled=false", f"output_dir={out}", log="locked.log")  # fmt: skip
        try:
            self.wait_for(first, out / "checkpoints" / "step-20" / MARKER, "locked.log")
            said = []
            for how in ("train.resume=auto", "train.overwrite=true"):
                said.append(self.one_line(self.rm("train", out / "config.yaml", how)))
                expect(f"process {first.pid} on {socket.gethostname()}" in said[-1], f"no holder named: {said[-1]}")
            expect(first.poll() is None, "the first run ended before the second was refused")
            first.send_signal(signal.SIGTERM)  # pre-empted: it saves a checkpoint and stops
            code = first.wait(timeout=120)
        finally:
            if first.poll() is None:
                os.killpg(first.pid, signal.SIGKILL)
                first.wait()
        expect(code == 143, f"the first run exited {code}, not 143 (stopped by SIGTERM)")
        rows = [json.loads(line) for line in (out / "train_log.jsonl").read_text().splitlines()]
        expect([r["step"] for r in rows] == list(range(1, len(rows) + 1)), "train_log.jsonl rows are not steps 1..n")
        expect(self.steps(out)[-1] >= rows[-1]["step"], f"no checkpoint of the stop: {self.steps(out)}")
        expect(not (out / LOCK).exists(), "the lock file was left behind")
        return f"the first run kept training to step {rows[-1]['step']} and stopped cleanly; second: {said[0]}"

    def items7_8(self) -> tuple[str, str]:
        """Dropout 0.3; one run whole, one stopped by Ctrl-C after step 1 and resumed: equal weights. Before
        the resume, another train.batch_size is refused (item 8)."""
        run = [*TINY, "model.random_init.config={attention_dropout: 0.3}", "train.max_steps=16", "train.save_steps=0"]
        whole, stopped = self.root / "whole", self.root / "stopped"
        self.ran(self.rm("train", QUICKSTART, *run, f"output_dir={whole}"), "the uninterrupted run")
        proc = self.start("train", QUICKSTART, *run, f"output_dir={stopped}", log="stopped.log")
        try:
            self.wait_for(proc, stopped / "train_log.jsonl", "stopped.log")
            proc.send_signal(signal.SIGINT)  # Ctrl-C
            code = proc.wait(timeout=120)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
        expect(code == 130, f"Ctrl-C: exit {code}, not 130")
        [step] = self.steps(stopped)
        expect(step % 12 != 0, f"stopped at step {step}, an epoch's end: no mid-epoch case to check")
        before = self.files(stopped)
        try:  # item 8, said apart from item 7
            line = self.one_line(self.rm("train", stopped / "config.yaml", "train.resume=auto", "train.batch_size=4"))
            expect("batch_size" in line, f"not the batch size: {line}")
            after = self.files(stopped)
            rewritten = after.pop("rm_run.json") != before.pop("rm_run.json")  # the run's manifest: rm's own file
            changed = [k for k in before if after.get(k) != before[k]]
            expect(not changed, f"refused in one line ({line[:60]}…), but the refused start rewrote {changed}"
                   + (" (config.yaml now holds train.batch_size: 4, so a plain resume from it is refused again)"
                      if "config.yaml" in changed else ""))  # fmt: skip
            item8 = (f"Ctrl-C at step {step} of 12 an epoch, then batch_size 8 -> 4: {line} (every other file "
                     f"unchanged{'; rm_run.json rewritten by the refused start' if rewritten else ''})")  # fmt: skip
        except Failed as e:
            item8 = Failed(str(e))
        # The resume as first typed (not from config.yaml, which item 8's refused start may have changed).
        self.ran(self.rm("train", QUICKSTART, *run, f"output_dir={stopped}", "train.resume=auto"), "the resume")
        a, b = (
            self.weights(whole / "export" / "model.safetensors"),
            self.weights(stopped / "export" / "model.safetensors"),
        )
        diff = max((a[k] - b[k]).abs().max().item() for k in a)
        expect(diff == 0, f"the resumed run is {diff:.3g} from the uninterrupted one")
        return (
            f"attention dropout 0.3, Ctrl-C at step {step} (exit 130), resumed to step 16: max weight diff 0",
            item8,
        )

    def item9(self) -> str:
        """A run whose disk fills during its second checkpoint: a 400 KiB tmpfs holds the run's files and one
        checkpoint (~280 KiB), not two. Then the same disk made larger and `train.resume=auto`."""
        out, said = self.root / "full", self.root / "full-said"
        out.mkdir()
        said.mkdir()
        rm = " ".join(map(_quote, self.command()))
        short = " ".join(_quote(a) for a in [*TINY, "train.max_steps=2", "train.save_steps=1"])
        script = f"""
            mount -t tmpfs -o size=400k tmpfs {out} || exit 99
            {rm} train {QUICKSTART} {short} output_dir={out} >{said}/out 2>{said}/err; echo $? >{said}/rc
            (cd {out} && find . -type f | sort) >{said}/files
            (cd {out}/checkpoints/step-1 && sha256sum * ) >{said}/step1 2>&1
            mount -o remount,size=64m tmpfs {out} || exit 98
            {rm} train {out}/config.yaml train.resume=auto >{said}/out2 2>{said}/err2; echo $? >{said}/rc2
            cat {out}/eval.json >{said}/eval.json
            (cd {out}/checkpoints/step-1 && sha256sum * ) >{said}/step1-after 2>&1
        """
        ns = ["unshare", "--user", "--map-root-user", "--mount", "sh", "-c", script]
        try:
            proc = subprocess.run(ns, cwd=REPO, env=self.env, capture_output=True, text=True, timeout=300)
        except FileNotFoundError:
            raise Failed("no `unshare` here: a full disk cannot be made without root (RLIMIT_FSIZE gives EFBIG, "
                         "not ENOSPC)") from None  # fmt: skip
        expect(proc.returncode not in (98, 99) and (said / "rc").exists(),
               f"no private tmpfs (user namespaces refused?): {proc.stderr.strip()[:200]}; a full disk cannot be "
               "made without root here (RLIMIT_FSIZE gives EFBIG, not ENOSPC)")  # fmt: skip
        full = subprocess.CompletedProcess([], int((said / "rc").read_text()), "", (said / "err").read_text())
        line = self.one_line(full)
        expect("no space left on the device" in line and "free)" in line, f"not a full disk: {line}")
        files = (said / "files").read_text().split()
        expect(not any(".partial" in f or LOCK in f for f in files), f"left behind: {files}")
        expect(f"./checkpoints/step-1/{MARKER}" in files, f"step-1 is not whole: {files}")
        expect(int((said / "rc2").read_text()) == 0, f"resume: {(said / 'err2').read_text()[-400:]}")
        resumed = json.loads((said / "eval.json").read_text())["train"]["resumed_from"]
        expect(resumed.endswith("/step-1"), f"resumed from {resumed}")
        return f"{line}; step-1 whole, nothing left behind, resumed from it on a larger disk"

    def item10(self) -> str:
        """A record with margin 1e39 (finite JSON, infinite float32); train.lr=.nan; `rm score` and `rm eval`
        of a model whose rewards overflow."""
        data = self.root / "margins"
        data.mkdir()
        for split in ("train", "test"):
            rows = [{"prompt": f"q{i}?", "chosen": f"yes {i}", "rejected": "no", "margin": 1.0} for i in range(24)]
            rows[1]["margin"] = 1e39 if split == "train" else 1.0
            (data / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        said = [self.one_line(self.train(self.root / "margin-run", f"data.source={data}"))]
        expect("train.jsonl:2" in said[0] and "margin" in said[0], f"the record is not named: {said[0]}")
        nan = self.train(self.root / "nan-run", "train.lr=.nan")
        said.append(" ".join([self.one_line(nan), *nan.stderr[nan.stderr.index("error: ") :].split()[3:]]))
        expect("train.lr" in said[1], f"train.lr is not named: {said[1]}")
        expect(not (self.root / "margin-run").exists() and not (self.root / "nan-run").exists(), "a run folder left")
        # A model whose reward head overflows float32 on some texts (one weight of 3e38 on one hidden unit).
        import torch
        from safetensors.torch import save_file

        model = self.root / "overflow"
        shutil.copytree(self.root / "whole" / "export", model)
        weights = self.weights(model / "model.safetensors")
        head = torch.zeros_like(weights["score.weight"])
        head[0, : head.shape[1] // 2] = 3e38
        save_file(weights | {"score.weight": head}, model / "model.safetensors", metadata={"format": "pt"})
        score = self.rm("score", "--model", model, "--input", data / "test.jsonl", "--out", self.root / "s.jsonl")
        lines = (self.root / "s.jsonl").read_text() if (self.root / "s.jsonl").exists() else ""
        expect("NaN" not in lines and "Infinity" not in lines, "score wrote NaN or Infinity")
        warned = [line for line in self.lines(score.stderr) if "non-finite" in line or "not finite" in line]
        expect("Traceback" not in score.stderr and len(warned) == 1, f"score said: {score.stderr[-500:]!r}")
        ev = self.rm("eval", "--model", model, "--data", data, "--out", self.root / "ev")
        expect("Traceback" not in ev.stderr and (self.root / "ev" / "report.md").is_file(), f"eval: {ev.stderr[-500:]}")
        result = (self.root / "ev" / "eval.json").read_text()
        expect("NaN" not in result and "Infinity" not in result, "eval.json holds NaN or Infinity")
        return f"{said[0]}; {said[1]}; score (rc {score.returncode}): {warned[0].strip()[:120]}; eval wrote report.md"

    def item11(self) -> str:
        """A sweep whose SQLite storage URL carries ?password= (SQLite ignores it; PostgreSQL would use it)."""
        import yaml

        sweep = self.root / "sweep"
        raw = {"base": str(QUICKSTART), "overrides": [*TINY, "train.max_steps=4", "export.enabled=false"],
               "sweep_dir": str(sweep), "sampler": "grid", "pruning": {"pruner": "none"},
               "space": {"train.lr": [3e-3]}}  # fmt: skip
        (self.root / "secret.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
        url = f"sqlite:///{sweep / 'study.db'}?password={SECRET}"
        said = []
        for more in (["--dry-run"], []):
            proc = self.rm("sweep", self.root / "secret.yaml", "--storage", url, *more)
            self.ran(proc, f"sweep {' '.join(more)}")
            said += [proc.stdout, proc.stderr]
        expect("password=***" in said[0], f"the dry run does not show a masked URL: {said[0][:300]!r}")
        try:
            import psycopg  # noqa: F401 (the sweep-db extra)

            with socket.socket() as s:
                s.bind(("127.0.0.1", 0))
                port = s.getsockname()[1]  # closed once the socket is: nothing listens there
            down = f"postgresql://rm@127.0.0.1:{port}/optuna?password={SECRET}&connect_timeout=5"
            line = self.one_line(self.rm("sweep", self.root / "secret.yaml", "--storage", down))
            said.append(line)
            unreachable = f"; unreachable PostgreSQL: {line[:100]}…"
        except ImportError:
            unreachable = "; (no psycopg: the unreachable-PostgreSQL case not run)"
        leaks = [str(p) for p in self.root.rglob("*") if SECRET in p.name or (p.is_file() and SECRET.encode() in
                 p.read_bytes() and p.name != "secret.yaml")]  # fmt: skip
        expect(not leaks, f"the password is in {leaks}")
        expect(not any(SECRET in text for text in said), "the password was printed")
        files = sum(1 for p in sweep.rglob("*") if p.is_file())
        return f"not in the output of --dry-run and the sweep, nor in its {files} files{unreachable}"


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(str(arg))


ROUND3 = {12: "turns", 13: "overwrite", 14: "holdout", 15: "diverged"}  # item -> module in scripts/faults/
ITEMS = range(1, 16)


def later_item(n: int, checks: Checks) -> Callable[[], str]:
    """Item n of scripts/faults/, imported when it runs (a module there gets this script's Checks and `expect`)."""

    def run() -> str:
        import importlib

        sys.path.insert(0, str(Path(__file__).resolve().parent))
        return importlib.import_module(f"faults.{ROUND3[n]}").check(checks, expect)

    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("items", nargs="*", type=int, help="items to check (default: 1-15)")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folder")
    args = parser.parse_args()
    wanted = set(args.items or ITEMS)
    root = Path(tempfile.mkdtemp(prefix="rm-fault-check-"))
    checks, failed, began = Checks(root), 0, time.monotonic()
    plan: list[tuple[list[int], Callable]] = [
        ([1], checks.item1), ([2], checks.item2), ([3], checks.item3), ([4], checks.item4), ([5], checks.item5),
        ([6], checks.item6), ([7, 8], checks.items7_8), ([9], checks.item9), ([10], checks.item10),
        ([11], checks.item11),
    ]  # fmt: skip
    plan += [([n], later_item(n, checks)) for n in ROUND3]
    if 10 in wanted:
        wanted.add(7)  # item 10's overflowing model is item 7's export
    try:
        for items, check in plan:
            if not wanted & set(items):
                continue
            try:
                saw = check()
                results = saw if isinstance(saw, tuple) else (saw,)
                lines = [f"item {n}: {'FAILED' if isinstance(s, Failed) else 'ok'} — {s}"
                         for n, s in zip(items, results, strict=True)]  # fmt: skip
            except Failed as e:
                lines = [f"item {n}: FAILED — {e}" for n in items]
            except Exception as e:  # noqa: BLE001 (a check that broke is a failed check, said in one line)
                lines = [f"item {n}: FAILED — {type(e).__name__}: {e}" for n in items]
            for n, line in zip(items, lines, strict=True):
                if n in set(args.items or ITEMS):
                    failed += "FAILED" in line
                    print(line, flush=True)
    finally:
        if args.keep:
            print(f"kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    print(f"{'all ok' if not failed else f'{failed} FAILED'} in {time.monotonic() - began:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
