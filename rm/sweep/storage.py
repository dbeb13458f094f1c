"""A sweep's storage URL: opened as Optuna's RDB storage, and shown with every credential in it masked.

The URL reaches SQLAlchemy, whose dialect hands its query to the driver, and libpq (psycopg) reads a password
in any of these forms, all of which the sweep ran with:

    postgresql://user:secret@host/db              the URL's own password (SQLAlchemy's `user:pw@`)
    postgresql://user@host/db?password=secret     a connect argument in the query (also sslpassword, passwd, …)
    postgresql:///db?dbname=host=h%20password=x   a libpq conninfo in a value (libpq expands dbname)

`masked` hides each of them wherever the sweep prints or raises the URL (logs and terminals are shared: a
password printed once by `--dry-run` is in someone's scrollback). A `passfile` is a path, not a secret, and is
shown. A storage that cannot be opened (a wrong password, a database that is down, a missing driver) is a
`ConfigError` of one line that names the masked URL and the database's reason, not SQLAlchemy's traceback.
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from urllib.parse import unquote_plus

import optuna

from rm.errors import ConfigError

SECRET_KEY = re.compile(r"pass(?:word|wd)|pwd|secret|token", re.IGNORECASE)
"""Query keys whose value is a credential: password, sslpassword, passwd (MySQL drivers), … but not passfile."""
USERINFO = re.compile(r"^([\w+.-]+://[^:/]*:)[^@]*@")
"""scheme://user:PASSWORD@: the user and password as SQLAlchemy splits them (the user holds no ':' or '/', the
password no '@'); `password_end` takes a password holding an '@' of its own up to its last one."""
CONNINFO = re.compile(r"(?:pass(?:word|wd)|pwd)\s*=|://[^/@\s]*:[^@\s]*@", re.IGNORECASE)
"""A value that carries a password of its own: a libpq conninfo (`password=…`) or a URL with one."""
MASK = "***"


def masked(url: str) -> str:
    """`url` with every credential replaced by ***, the rest as written.

    postgresql://user:secret@host/db?sslpassword=x&passfile=/p -> postgresql://user:***@host/db?sslpassword=***&passfile=/p
    """
    if "://" not in url:  # not a URL: SQLAlchemy refuses it, and its text may be a libpq conninfo
        return MASK if CONNINFO.search(url) else url
    start, end = password_span(url)
    url = url[:start] + MASK + url[end:] if end > start else url
    base, sep, query = url.partition("?")
    scheme, _, rest = base.partition("://")
    authority, slash, database = rest.partition("/")
    if CONNINFO.search(unquote_plus(database)):
        database = MASK
    items = []
    for item in query.split("&") if sep else []:
        key, eq, value = item.partition("=")
        if eq and (SECRET_KEY.search(unquote_plus(key)) or CONNINFO.search(unquote_plus(value))):
            value = MASK
        items.append(key + eq + value)
    return f"{scheme}://{authority}{slash}{database}{sep}{'&'.join(items)}"


def password_span(url: str) -> tuple[int, int]:
    """Where the password of `url`'s `user:password@` is; (0, 0) for none. SQLAlchemy ends it at the first '@'; an
    unencoded '@' (or '/') in it would leave its rest shown as the host, so it ends at the last '@' before the
    query where that is further on (`rm:a@b/c@db/x` -> `a@b/c`)."""
    match = USERINFO.match(url)
    if match is None:
        return 0, 0
    start, end = match.end(1), match.end() - 1
    last = url.partition("?")[0].rfind("@")
    return start, max(end, last)


def sqlite_file(url: str) -> Path | None:
    """The database file of a `sqlite:///PATH` URL (its query, if any, left off); None for other storages."""
    if not url.startswith("sqlite:///"):
        return None
    path = url[len("sqlite:///") :].partition("?")[0]
    return Path(path) if path and path != ":memory:" else None


def open_storage(
    url: str, heartbeat_interval: int | None = None, grace_period: int | None = None, callback=None
) -> optuna.storages.RDBStorage:
    """Optuna's RDB storage at `url` (with a heartbeat when `heartbeat_interval` is given), or a `ConfigError`
    naming the masked URL and why it cannot be opened."""
    engine = {"connect_args": {"timeout": 60}} if url.startswith("sqlite") else {}  # several writers wait their turn
    beat = {} if heartbeat_interval is None else {"heartbeat_interval": heartbeat_interval}
    if beat:
        beat |= {"grace_period": grace_period, "heartbeat_stale_trial_callback": callback}
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(url, engine_kwargs=engine, **beat)
    except Exception as e:  # SQLAlchemy's OperationalError, ArgumentError; Optuna's ImportError for a driver
        raise ConfigError(f"cannot open the sweep storage {masked(url)}: {reason(e, url)}") from None


def reason(error: BaseException, url: str) -> str:
    """The first line of the database's own message (the DBAPI error under SQLAlchemy's wrapper), with any
    credential of `url` that it repeats masked."""
    text = str(getattr(error, "orig", None) or error).strip().splitlines()
    line = (text[0] if text else "") or type(error).__name__
    for secret in secrets_of(url):
        line = line.replace(secret, MASK)
    return line


def secrets_of(url: str) -> list[str]:
    """The credentials `masked` hides, as written and decoded, longest first (so none is left half masked)."""
    found = set()
    start, end = password_span(url)
    found.add(url[start:end])
    for item in url.partition("?")[2].split("&"):
        key, _, value = item.partition("=")
        if SECRET_KEY.search(unquote_plus(key)):
            found.add(value)
    found |= {unquote_plus(s) for s in found}
    return sorted((s for s in found if s), key=len, reverse=True)
