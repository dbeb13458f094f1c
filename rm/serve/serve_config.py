"""What `python -m rm serve` was asked for, in one picklable record that every worker process gets.

Kept free of torch and of the model: the command line checks it (a non-loopback bind without a key is refused
before minutes of model loading), and the supervisor of `--workers N` builds it without importing torch. The API
key is never a field here: it travels in the environment (`RM_API_KEY`), never on a child's command line and never
in anything this record prints.
"""

from __future__ import annotations

import ipaddress
import json
import math
import os
from dataclasses import asdict, dataclass

from rm.config.flags import option
from rm.errors import ConfigError

KEY_ENV = "RM_API_KEY"
"""The environment variable that holds the API key (also how `--workers` children receive it)."""
LOOPBACK_NAMES = ("localhost", "localhost.localdomain", "ip6-localhost")
MAX_WAIT_MS = 60_000.0
"""The longest --max-wait-ms: a batch that waits longer for company outlasts the client's 60 s default timeout."""
MAX_SECONDS = 3600.0
"""The longest --read-timeout and --drain-seconds: an hour; anything longer is a server that never lets go."""


@dataclass(frozen=True)
class ServeConfig:
    """The server's settings: `rm serve`'s options (their --help and README rows are these docstrings), minus
    the API key."""

    model: str = option("", positional=True, nargs="?")
    """an rm export (a process-reward one too), a run directory, or a sequence-classification folder or Hub name
    with one output (optional with --ensemble, whose first member it then is)"""
    ensemble: tuple[str, ...] = option((), nargs="+", metavar="MODEL")
    """serve several models as one (--ensemble A B C, or MODEL --ensemble B C): every text scored by each, `rewards`
    the --ensemble-reward of theirs, with their mean, std, conservative reward and each one's beside it (LoRA runs of
    one base hold it once)"""
    ensemble_reward: str = option("mean", choices=["mean", "conservative", "min"])
    """with --ensemble, what `rewards` carries: the members' mean, the conservative mean - K x std, or their min"""
    uncertainty_k: float = option(1.0)
    """with --ensemble, K of the conservative reward mean - K x std (std over the members, ddof 0)"""
    host: str = option("127.0.0.1")
    """address to bind (127.0.0.1: this machine only; any other needs an API key)"""
    port: int = option(8000)
    """port (0 picks a free one and prints it)"""
    max_batch_tokens: int = option(16384)
    """token slots (rows x width) of one forward: the model thread fills batches up to this, longest first"""
    max_wait_ms: float = option(5.0)
    """how long the model thread waits after the first queued request for others to join its batches"""
    max_texts: int = option(1024)
    """texts (responses, queries, /score_steps solutions and problems) in one request; more is refused with 413"""
    max_body_bytes: int = option(8 * 1024 * 1024)
    """bytes of one request body (8 MiB); more is refused with 413 before it is read"""
    on_too_long: str = option("truncate", choices=["truncate", "error"])
    """truncate: a text over max_length loses its oldest tokens (rm's one rule) and is flagged; error: 422"""
    workers: int = option(1)
    """processes on the one port, each holding the model"""
    device: str = option("auto")
    """cpu, cuda, cuda:N, or auto (the GPU when there is one); with cuda and N workers, worker i takes GPU i"""
    trust_remote_code: bool = option(False)
    """run code from the model's repository"""
    normalize: bool = option(False)
    """report (reward - mean) / std with the export's recorded statistics"""
    max_length: int = option(0)
    """tokens per scored text (0: the run's collator.max_length, else the model's limit, as `rm score`)"""
    dtype: str = option("float32", choices=["float32", "bfloat16", "float16"])
    """weights' dtype (bfloat16 halves the memory, on a GPU that has it)"""
    num_threads: int = option(0)
    """torch CPU threads per worker (0: the usable cores divided among the workers)"""
    batch_threads: int = option(0)
    """parts of one batch scored at once, each a forward in a thread of its own on num_threads torch threads (0: 2
    on the CPU, where one forward leaves cores idle between its parallel operations and another part's fill them,
    in the memory of one batch; 1 on a GPU)"""
    prefix_cache: bool = option(True, "--no-prefix-cache")
    """score a group's responses on its prompt's cached keys and values where the model allows it
    (rm/model/cached_prompt.py); off (--no-prefix-cache): in the shared layout's packed rows"""
    auth: bool = option(True, "--no-auth")
    """require an API key on a non-loopback --host; off (--no-auth): serve it open (warns)"""
    access_log: bool = option(False)
    """log one line per request (paths, never headers)"""
    read_timeout: float = option(60.0)
    """seconds a client has to send a request's head, and again its body (8 MiB at 2 Mbit/s takes 34 s); later:
    408 and the connection closed, so a slow client cannot hold a connection or the drain for ever"""
    max_connections: int = option(512)
    """open connections per worker (lowered to what the open-file limit allows); one more is answered 503 and
    closed. Each takes a file descriptor, and a low `ulimit -n` must not run out of them"""
    drain_seconds: float = option(30.0)
    """how long SIGTERM waits for requests in flight before answering them 503 (30 s: Kubernetes' default grace
    period before it sends SIGKILL)"""
    allow_hosts: tuple[str, ...] = option((), "--allow-host", action="append", metavar="NAME")
    """Host header names answered besides the loopback ones (localhost, 127.x.x.x, [::1]), repeatable; `*`: any. A
    server bound to a non-loopback address (which needs a key) answers any name unless some are given. Loopback
    only by default, so a web page that rebinds its DNS name to 127.0.0.1 cannot read this server from a browser"""

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ServeConfig:
        fields = json.loads(text)
        tuples = {k: tuple(fields.get(k, ())) for k in ("allow_hosts", "ensemble")}
        return cls(**{**fields, **tuples})

    def check(self) -> None:
        """Every limit a positive number, one of the known choices: one line naming the flag, before any loading."""
        for flag, value in (
            ("--max-batch-tokens", self.max_batch_tokens),
            ("--max-texts", self.max_texts),
            ("--max-body-bytes", self.max_body_bytes),
            ("--workers", self.workers),
            ("--max-connections", self.max_connections),
        ):
            if value < 1:
                raise ConfigError(f"{flag} must be at least 1, got {value}")
        if self.max_length < 0 or self.num_threads < 0 or self.batch_threads < 0:
            raise ConfigError("--max-length, --num-threads and --batch-threads cannot be negative")
        for flag, value, top, low in (
            ("--max-wait-ms", self.max_wait_ms, MAX_WAIT_MS, 0.0),
            ("--read-timeout", self.read_timeout, MAX_SECONDS, 0.001),
            ("--drain-seconds", self.drain_seconds, MAX_SECONDS, 0.0),
        ):
            if not (math.isfinite(value) and low <= value <= top):  # NaN fails every comparison: refused too
                raise ConfigError(f"{flag} must be a number from {low:g} to {top:g}, got {value}")
        if not 0 <= self.port <= 65535:
            raise ConfigError(f"--port must be 0-65535, got {self.port}")
        if self.on_too_long not in ("truncate", "error"):
            raise ConfigError(f"--on-too-long must be truncate or error, got {self.on_too_long!r}")
        device_ok = self.device in ("auto", "cpu", "cuda") or (
            self.device.startswith("cuda:") and self.device[5:].isdigit()
        )
        if not device_ok:
            raise ConfigError(f"--device must be cpu, cuda, cuda:N or auto, got {self.device!r}")
        if not self.model and not self.ensemble:
            raise ConfigError("give the MODEL to serve, or the members of an ensemble as --ensemble A B C")
        if self.ensemble and len(self.members) < 2:
            raise ConfigError(f"--ensemble needs two or more models, got {len(self.members)}: serve one as MODEL")
        if not (math.isfinite(self.uncertainty_k) and self.uncertainty_k >= 0):
            raise ConfigError(f"--uncertainty-k must be a finite number >= 0, got {self.uncertainty_k}")
        for name in self.allow_hosts:
            if not name or any(c in name for c in " /@,"):
                raise ConfigError(f"--allow-host takes a host name (or *), got {name!r}")

    @property
    def members(self) -> tuple[str, ...]:
        """An ensemble's members in order (MODEL first where given); () for one model."""
        return ((self.model,) if self.model else ()) + self.ensemble if self.ensemble else ()

    @property
    def name(self) -> str:
        """What the server serves, in its start line and /info: MODEL, or its ensemble's members."""
        return f"ensemble of {len(self.members)} ({', '.join(self.members)})" if self.ensemble else self.model

    def host_allowed(self, host: str | None) -> bool:
        """Whether a request with this Host header (name, or name:port) is answered: a loopback name always, one
        of --allow-host, and any on a non-loopback bind without --allow-host."""
        if "*" in self.allow_hosts or (not self.allow_hosts and not is_loopback(self.host)):
            return True
        name = host_name(host or "")
        return bool(name) and (is_loopback(name) or name in {h.lower().rstrip(".") for h in self.allow_hosts})


def host_name(header: str) -> str:
    """The name of a Host header, lower case, without its port or a final dot ("[::1]:8000" -> "::1")."""
    header = header.strip().lower()
    if header.startswith("["):
        return header[1 : header.find("]")] if "]" in header else ""
    name, colon, port = header.rpartition(":")
    return (name if colon and port.isdigit() else header).rstrip(".")


def is_loopback(host: str) -> bool:
    """Whether binding `host` keeps the server reachable from this machine only (127.0.0.0/8, ::1, localhost)."""
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: it may resolve to any interface


def api_key(flag_value: str | None, environ: dict[str, str] | None = None) -> str | None:
    """The key from --api-key, else RM_API_KEY; None when neither is set (an empty value is refused)."""
    environ = os.environ if environ is None else environ
    key = flag_value if flag_value is not None else environ.get(KEY_ENV)
    if key is not None and not key.strip():
        raise ConfigError(f"the API key (--api-key or {KEY_ENV}) is empty")
    return key


def auth_warning(cfg: ServeConfig, key: str | None) -> str:
    """Refuse an open server on a non-loopback address; return the warning an explicit --no-auth earns there.

    A reward server on 0.0.0.0 without a key lets anyone on the network spend its GPU (and read what it
    scores). Loopback binds need no key: a client on another machine reaches them through an SSH tunnel, which
    is also the way for a client that cannot send headers (OpenRLHF's remote reward client).
    """
    if is_loopback(cfg.host):
        return ""
    if not cfg.auth:
        return (
            f"warning: serving on {cfg.host} without an API key (--no-auth): anyone who can reach this port can "
            "use the model"
        )
    if key is None:
        raise ConfigError(
            f"--host {cfg.host} is reachable from other machines: give an API key (set {KEY_ENV}, or --api-key), "
            "bind 127.0.0.1 and reach it through an SSH tunnel, or pass --no-auth to serve it open"
        )
    return ""
