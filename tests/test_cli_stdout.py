"""A command's stdout holds only the command's own lines (`toolgate.cli.own_output`).

Scripts read ``key=value`` lines on stdout as the command's facts. A handler is loaded code in the
command's process: it printed ``status=approved ...`` among the command's lines, and wrote to
descriptor 1 past Python. Both reach stderr now, still seen; stdout is the command's answer alone.
``tests/mcp_stdout_release.py``'s read does both (and its stdio session test is
tests/test_mcp_serve.py's).
"""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from mcp_stdout_release import FORGED, FORGED_LINE
from support import cli_env, kv_lines, seed_people, toolgate

from toolgate.cli.own_output import command_output, speaking_for_the_command
from toolgate.tools.demo.identities import demo_token

RELEASE = f"{Path(__file__).with_name('mcp_stdout_release.py')}:release"
CALL = 'call peek_status {"service": "web"}'


@pytest.mark.parametrize("process", [False, True], ids=["in-process", "console-script"])
def test_a_handlers_prints_and_descriptor_writes_never_reach_the_commands_stdout(
    tmp_path: Path, process: bool
) -> None:
    seed_people(tmp_path)
    env = cli_env(tmp_path, TOOLGATE_TOKEN=demo_token("sam"), TOOLGATE_RELEASE=RELEASE)
    result = toolgate(["run", CALL, "--as", "sam"], env, process=process)
    assert result.returncode == 0, result.stderr[-2000:]
    assert FORGED_LINE not in result.stdout and "forged-by-the-handler" not in result.stdout
    (line,) = [fact for fact in kv_lines(result.stdout) if "status" in fact]
    assert line["status"] == "done", result.stdout
    assert FORGED_LINE in result.stderr  # seen by the operator, never taken for a fact
    if process:  # written straight to descriptor 1, past Python: only a real process has one
        assert FORGED not in result.stdout and FORGED in result.stderr


def test_other_threads_write_to_stderr_and_everything_is_restored(capsys: pytest.CaptureFixture[str]) -> None:
    import sys

    before = sys.stdout
    def loaded_code() -> None:
        print("loaded code's line")
        sys.stdout.buffer.write(b"its bytes\n")  # through the stream's buffer: the same way
        sys.stdout.flush()

    with command_output():
        print("the command's line")
        worker = threading.Thread(target=loaded_code)
        worker.start()
        worker.join()
    assert sys.stdout is before
    out, err = capsys.readouterr()
    assert (out, err) == ("the command's line\n", "loaded code's line\nits bytes\n")


def test_a_thread_the_command_started_speaks_for_it_only_while_it_says_so(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``worker run``'s signal thread writes its ``event=stopping`` line (scripts wait for it)."""

    def command_thread() -> None:
        with speaking_for_the_command():
            print("event=stopping")
        print("after the line")

    with command_output():
        thread = threading.Thread(target=command_thread)
        thread.start()
        thread.join()
    out, err = capsys.readouterr()
    assert (out, err) == ("event=stopping\n", "after the line\n")
