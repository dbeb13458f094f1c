"""A sweep storage URL's password, in every form SQLAlchemy and libpq take, is never printed or written:
`?password=…` ran the sweep and was printed in clear by `--dry-run` and the sweep's first line. A database that
cannot be opened (down, a wrong password) ends in one line naming the masked URL, not SQLAlchemy's traceback."""

import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import optuna
import pytest
import yaml

import rm.sweep.driver
from conftest import QUICKSTART, REPO, TINY_MODEL
from rm.cli import main as cli
from rm.sweep.storage import masked

optuna.logging.set_verbosity(optuna.logging.WARNING)
SECRET = "Pw-7f3e9c1b"
TINY = [  # a run of a few seconds: 4 optimizer steps, no periodic eval, no export
    "data.synthetic.n_train=120",
    "data.synthetic.n_eval=30",
    *TINY_MODEL,
    "collator.max_length=128",
    "train.max_steps=4",
    "train.eval_steps=0",
    "train.save_steps=0",
    "train.report_to=[]",
    "export.enabled=false",
    "train.num_threads=1",
]


@pytest.mark.parametrize(
    "url, shown",
    [
        (f"postgresql://rm:{SECRET}@db.example:5432/optuna", "postgresql://rm:***@db.example:5432/optuna"),
        (f"postgresql+psycopg://rm@db/optuna?password={SECRET}", "postgresql+psycopg://rm@db/optuna?password=***"),
        (f"postgresql://rm@db/o?sslmode=require&sslpassword={SECRET}&passfile=/home/rm/.pgpass",
         "postgresql://rm@db/o?sslmode=require&sslpassword=***&passfile=/home/rm/.pgpass"),  # a path stays
        (f"mysql+pymysql://rm@db/optuna?passwd={SECRET}", "mysql+pymysql://rm@db/optuna?passwd=***"),
        (f"postgresql://rm@db/o?pass%77ord={SECRET}", "postgresql://rm@db/o?pass%77ord=***"),  # key %-encoded
        (f"postgresql://rm:a@b/{SECRET}@db/o", "postgresql://rm:***@db/o"),  # '@' and '/' inside the password
        (f"postgresql:///o?dbname=host%3Ddb%20password%3D{SECRET}", "postgresql:///o?dbname=***"),  # libpq conninfo
        (f"host=db password={SECRET}", "***"),  # a conninfo where a URL belongs: SQLAlchemy's error repeats it
        ("postgresql://rm@db:5432/optuna?application_name=sweep", "postgresql://rm@db:5432/optuna?application_name=sweep"),
    ],
)  # fmt: skip
def test_every_credential_form_is_masked_and_the_rest_shown_as_written(url, shown):
    assert masked(url) == shown


def sweep_file(tmp_path: Path, **keys) -> Path:
    raw = {"base": str(QUICKSTART), "overrides": TINY, "sweep_dir": str(tmp_path / "sweep"), "sampler": "grid"}
    raw |= {"pruning": {"pruner": "none"}, "space": {"train.lr": [3e-3]}} | keys
    path = tmp_path / "secret.yaml"
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def assert_nowhere(root: Path, *texts: str) -> None:
    """No file under `root` holds SECRET in its name or its bytes, nor does any of `texts`."""
    files = [p for p in root.rglob("*") if p.is_file()]
    assert files
    for path in files:
        assert SECRET not in str(path) and SECRET.encode() not in path.read_bytes(), path
    for text in texts:
        assert SECRET not in text


@pytest.mark.parametrize("launch", ["in-process", pytest.param("subprocess", marks=pytest.mark.slow)])
def test_a_query_password_is_masked_everywhere_a_sweep_prints_or_writes(tmp_path, monkeypatch, capsys, caplog, launch):
    """A SQLite study ignores ?password= (the sweep runs, as a PostgreSQL one with it would). In process, the trial
    trains nothing (as tests/sweep/stand_in.py); as a child, it is a real run that gets the URL from the sweep.
    Every file and log the sweep wrote is read for the password."""
    monkeypatch.chdir(REPO)  # the child runs `python -m rm` from here
    if launch == "in-process":
        monkeypatch.setattr(rm.sweep.driver, "run_in_process", stand_in)
    path = sweep_file(tmp_path, launch=launch)
    url = f"sqlite:///{tmp_path / 'sweep' / 'study.db'}?password={SECRET}"
    assert cli(["sweep", str(path), "--storage", url, "--dry-run"]) == 0
    dry = capsys.readouterr()
    assert f"study in sqlite:///{tmp_path / 'sweep' / 'study.db'}?password=***" in dry.out
    assert cli(["sweep", str(path), "--storage", url]) == 0
    run = capsys.readouterr()
    assert run.out.splitlines()[0].endswith("study in " + masked(url)) and "| finished |" in run.out
    if launch == "subprocess":
        assert (tmp_path / "sweep" / "trials" / "0000" / "sweep_trial.log").is_file()  # the child's log is read too
    assert_nowhere(tmp_path, dry.out, dry.err, run.out, run.err, caplog.text)
    assert cli(["sweep", str(path), "--storage", url, "--report-only"]) == 0
    again = capsys.readouterr()
    assert_nowhere(tmp_path, again.out, again.err)


def stand_in(trial, *args) -> dict:
    return {"overall": {"accuracy": trial.params["train.lr"], "loss": 1.0}, "subsets": {}}


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # nothing listens once it is closed


@pytest.mark.parametrize("form", ["userinfo", "query"])
def test_an_unreachable_database_ends_in_one_line_without_the_password(tmp_path, capsys, form):
    psycopg = pytest.importorskip("psycopg", reason="the PostgreSQL driver comes with the sweep-db extra")
    del psycopg
    port = closed_port()
    url = {
        "userinfo": f"postgresql://rm:{SECRET}@127.0.0.1:{port}/optuna",
        "query": f"postgresql://rm@127.0.0.1:{port}/optuna?password={SECRET}&connect_timeout=5",
    }[form]
    path = sweep_file(tmp_path)
    for flags in ([], ["--worker"], ["--report-only"]):
        assert cli(["sweep", str(path), "--storage", url, *flags]) == 2
        out, err = capsys.readouterr()
        assert err.startswith(f"error: cannot open the sweep storage {masked(url)}: connection failed: ")
        assert len(err.splitlines()) == 1 and "Connection refused" in err, err
        assert SECRET not in out + err
    assert not (tmp_path / "sweep" / "study.db").exists()


@pytest.fixture(scope="module")
def password_server():
    """A PostgreSQL server of its own whose user `rm` logs in with SECRET (scram-sha-256), as a shared study's
    database does; the trust-auth server of test_postgres.py takes any password, so a wrong one needs this."""
    pytest.importorskip("psycopg", reason="the PostgreSQL driver comes with the sweep-db extra")
    from test_postgres import free_port, postgres_bin

    bindir = postgres_bin()
    if bindir is None:
        pytest.skip("no PostgreSQL server binaries (initdb, pg_ctl): apt-get install postgresql")
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user and shutil.which("runuser") is None:
        pytest.skip("running as root, and no runuser to start PostgreSQL as another user")
    root = Path(tempfile.mkdtemp(prefix="rm-postgres-pw-"))
    if as_user:
        shutil.chown(root, "postgres")
    (root / "pw").write_text(SECRET + "\n")
    if as_user:
        shutil.chown(root / "pw", "postgres")
    port, data = free_port(), root / "data"

    def pg(*args: str) -> None:
        subprocess.run(as_user + list(args), check=True, capture_output=True, timeout=120)

    pg(str(bindir / "initdb"), "-D", str(data), "-A", "scram-sha-256", "-U", "rm", f"--pwfile={root / 'pw'}",
       "-E", "UTF8", "--no-sync")  # fmt: skip
    options = f"-h 127.0.0.1 -p {port} -k {root} -F"
    pg(str(bindir / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "server.log"), "-w", "start")
    try:
        yield f"127.0.0.1:{port}"
    finally:
        stop = [str(bindir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"]
        subprocess.run(as_user + stop, capture_output=True, timeout=60)
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.slow
def test_on_postgres_a_wrong_password_is_one_line_and_a_query_password_runs_the_sweep_unseen(
    password_server, tmp_path, monkeypatch, capsys, caplog
):
    monkeypatch.chdir(REPO)
    path = sweep_file(tmp_path, launch="subprocess")
    wrong = f"postgresql://rm:not-{SECRET}@{password_server}/postgres"
    assert cli(["sweep", str(path), "--storage", wrong]) == 2
    out, err = capsys.readouterr()
    assert len(err.splitlines()) == 1 and 'password authentication failed for user "rm"' in err, err
    assert err.startswith("error: cannot open the sweep storage postgresql://rm:***@") and SECRET not in out + err

    url = f"postgresql://rm@{password_server}/postgres?password={SECRET}"
    assert cli(["sweep", str(path), "--storage", url]) == 0
    run = capsys.readouterr()
    assert run.out.splitlines()[0].endswith(f"study in postgresql://rm@{password_server}/postgres?password=***")
    assert "| finished |" in run.out  # the trial's child reached the study with the password too
    assert_nowhere(tmp_path, run.out, run.err, caplog.text)
