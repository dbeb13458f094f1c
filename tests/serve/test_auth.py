"""Safe by default: a loopback bind unless asked, a key required (and checked, and never logged) elsewhere, an open
non-loopback server only with an explicit --no-auth (and a warning)."""

import logging

import pytest
from serving import client, scorer_for

import rm.serve.launch
from rm.cli import main as cli
from rm.errors import ConfigError
from rm.serve.serve_config import ServeConfig, api_key, auth_warning, is_loopback

KEY = "k3y-that-must-never-be-logged"


@pytest.fixture(scope="module")
def scorer(exported_tiny):
    return scorer_for(str(exported_tiny))


def test_with_a_key_every_route_but_health_needs_it(scorer, caplog):
    with caplog.at_level(logging.DEBUG), client(scorer, key=KEY) as c:
        assert c.get("/health").status_code == 200
        for path, method in [("/score", c.post), ("/info", c.get), ("/nowhere", c.get)]:
            missing = method(path, json={"texts": ["hi"]}) if method == c.post else method(path)
            assert missing.status_code == 401 and missing.json() == {"error": "missing or wrong API key"}
        wrong = c.post("/score", json={"texts": ["hi"]}, headers={"Authorization": f"Bearer {KEY}x"})
        bare = c.post("/score", json={"texts": ["hi"]}, headers={"Authorization": KEY})
        good = c.post("/score", json={"texts": ["hi"]}, headers={"Authorization": f"Bearer {KEY}"})
        bad_body = c.post("/score", content=b"{", headers={"Authorization": f"Bearer {KEY}"})
    assert wrong.status_code == 401 and bare.status_code == 401
    assert good.status_code == 200 and len(good.json()["rewards"]) == 1
    assert bad_body.status_code == 400
    assert KEY not in caplog.text and KEY not in bad_body.text


def test_loopback_addresses():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.1.2.3", "example.org"))


def test_a_non_loopback_bind_needs_a_key_or_an_explicit_no_auth():
    open_cfg = ServeConfig(model="m", host="0.0.0.0")
    with pytest.raises(ConfigError, match="reachable from other machines: give an API key"):
        auth_warning(open_cfg, None)
    assert auth_warning(open_cfg, KEY) == ""
    assert auth_warning(ServeConfig(model="m"), None) == ""  # loopback: no key needed
    warning = auth_warning(ServeConfig(model="m", host="0.0.0.0", auth=False), None)
    assert warning.startswith("warning: serving on 0.0.0.0 without an API key (--no-auth)")
    assert api_key(None, {"RM_API_KEY": KEY}) == KEY and api_key(None, {}) is None
    with pytest.raises(ConfigError, match="is empty"):
        api_key(" ", {})


def test_the_cli_refuses_before_loading_and_passes_the_key_but_never_prints_it(monkeypatch, capsys, tmp_path):
    """The refusal comes before the model loads (the model here does not even exist); a served key reaches the
    server but no output; --no-auth warns; bad limits are one line each."""
    monkeypatch.delenv("RM_API_KEY", raising=False)
    missing = str(tmp_path / "no-model")
    assert cli(["serve", missing, "--host", "0.0.0.0"]) == 2
    assert "error: --host 0.0.0.0 is reachable from other machines" in capsys.readouterr().err
    assert cli(["serve", missing, "--workers", "0"]) == 2
    assert "error: --workers must be at least 1" in capsys.readouterr().err
    assert cli(["serve", missing, "--device", "tpu"]) == 2
    assert "--device must be cpu, cuda, cuda:N or auto" in capsys.readouterr().err

    served = []
    monkeypatch.setattr(rm.serve.launch, "serve", lambda cfg, key, announce: served.append((cfg, key)) or 0)
    monkeypatch.setenv("RM_API_KEY", KEY)
    assert cli(["serve", missing, "--host", "0.0.0.0", "--port", "9"]) == 0
    assert served[-1][1] == KEY and served[-1][0].host == "0.0.0.0" and served[-1][0].port == 9
    assert served[-1][0].trust_remote_code is False  # the model's own code runs only when asked:
    assert cli(["serve", missing, "--trust-remote-code"]) == 0 and served[-1][0].trust_remote_code is True
    monkeypatch.delenv("RM_API_KEY")
    assert cli(["serve", missing, "--host", "0.0.0.0", "--no-auth"]) == 0
    assert served[-1][1] is None
    out = capsys.readouterr()
    assert "warning: serving on 0.0.0.0 without an API key" in out.err and KEY not in out.out + out.err
    assert KEY not in served[0][0].to_json()  # the settings a worker gets never hold the key


def test_a_busy_port_is_refused_before_the_model_loads(tmp_path, capsys):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        assert cli(["serve", str(tmp_path / "absent"), "--port", str(port)]) == 2
    assert f"error: cannot listen on 127.0.0.1:{port}" in capsys.readouterr().err


def test_a_model_that_cannot_load_is_one_error_line(tmp_path, capsys):
    assert cli(["serve", str(tmp_path / "absent"), "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "does not exist" in err[0]
