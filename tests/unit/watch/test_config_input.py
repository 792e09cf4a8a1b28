"""Token and configuration files are read with a bound: /dev/zero, a huge file, a directory or a
pipe nobody writes to is one clear ConfigError (exit 2 from the CLI), never gigabytes or a hang."""

from __future__ import annotations

import os
import re
import resource
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from trainguard.cli.main import app
from trainguard.errors import ConfigError
from trainguard.watch.config import MAX_CONFIG_BYTES, MAX_SECRET_BYTES, load_config, read_secret

_MiB = 1 << 20


def _peak_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


def test_dev_zero_as_a_token_file_is_refused_without_reading_it() -> None:
    before = _peak_rss_bytes()
    with pytest.raises(ConfigError, match=r"^--token-file: cannot read /dev/zero: not a regular "
                                          r"file \(a character device\)$"):
        read_secret("/dev/zero", "--token-file")
    assert _peak_rss_bytes() - before < 64 * _MiB


@pytest.mark.parametrize(("content", "match"), [
    (b"t" * (MAX_SECRET_BYTES + 1), f"is larger than {MAX_SECRET_BYTES} bytes"),
    (b"", "is empty"),
    (b" \n\n", "is empty"),
    (b"\xff\xfe token", "is not UTF-8 text"),
    (b"abc def\n", "must hold one token"),
    (b"abc\ndef\n", "must hold one token"),
    (b"abc\x1b[2Jdef", "must hold one token"),
])
def test_a_bad_token_file_is_one_clear_error(tmp_path: Path, content: bytes, match: str) -> None:
    path = tmp_path / "tok"
    path.write_bytes(content)
    with pytest.raises(ConfigError, match=f"^http.token_file: {path} {match}"):
        read_secret(path, "http.token_file")


def test_a_token_file_with_a_trailing_newline_is_read(tmp_path: Path) -> None:
    path = tmp_path / "tok"
    path.write_bytes(b"s3cr3t-token_=\n")
    assert read_secret(path, "k") == "s3cr3t-token_="


def test_a_directory_is_not_a_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"not a regular file \(a directory\)"):
        read_secret(tmp_path, "k")


def test_a_pipe_without_a_writer_does_not_hang(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    import trainguard.watch.config as config

    monkeypatch.setattr(config, "FIFO_WAIT_S", 0.2)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="nobody wrote to within"):
        read_secret(fifo, "k")


def test_a_pipe_with_a_writer_is_read_like_process_substitution(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def write() -> None:  # like `<(pass show x)`: the writer's open waits for the reader
        w = os.open(fifo, os.O_WRONLY)
        try:
            os.write(w, b"tok-from-pipe\n")
        finally:
            os.close(w)

    writer = threading.Thread(target=write, daemon=True)
    writer.start()
    try:
        assert read_secret(fifo, "k") == "tok-from-pipe"
    finally:
        writer.join(timeout=10)


def test_a_huge_or_special_config_file_is_refused(tmp_path: Path) -> None:
    big = tmp_path / "big.toml"
    big.write_bytes(b"#" * (MAX_CONFIG_BYTES + 1))
    with pytest.raises(ConfigError, match=f"larger than {MAX_CONFIG_BYTES} bytes"):
        load_config(big, {})
    with pytest.raises(ConfigError, match=r"/dev/zero: not a regular file"):
        load_config(Path("/dev/zero"), {})
    deep = tmp_path / "deep.toml"
    deep.write_text("a = " + "[" * 100_000)
    with pytest.raises(ConfigError, match="not valid TOML"):
        load_config(deep, {})


def test_token_files_named_in_the_config_are_bounded_too(tmp_path: Path) -> None:
    for section in ("http", "alertmanager", "prometheus"):
        cfg = tmp_path / f"{section}.toml"
        cfg.write_text(f"[watch]\nprometheus = 'http://p'\n[{section}]\n"
                       f"token_file = '/dev/zero'\n")
        with pytest.raises(ConfigError, match=f"^{re.escape(str(cfg))}: {section}.token_file: "
                           "cannot read /dev/zero"):
            load_config(cfg, {})


def test_cli_token_file_dev_zero_exits_2_with_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["watch", "--prometheus", "http://p", "--token-file",
                                      "/dev/zero", "--state-dir", str(tmp_path / "s"),
                                      "--once"])
    assert result.exit_code == 2, result.output
    assert "--token-file: cannot read /dev/zero: not a regular file" in result.output
    assert "Traceback" not in result.output
