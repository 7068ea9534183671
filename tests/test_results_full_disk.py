"""results.py on a full disk (issue #68): one line, exit 2, no temporary file left, RESULTS.md as it was. The
shared atomic writer (data.common.atomic_write_bytes) removes its temporary file and raises DiskFull, a UserError;
results.main says it in one line (its @one_line_errors)."""
import errno
import os

import results
from test_errors import refusal
from test_second_day_tools import files_in, results_copy  # noqa: F401 (a fixture)


def test_results_on_a_full_disk_is_one_line_and_leaves_no_temporary_file(results_copy, capsys, monkeypatch):  # noqa: F811
    real = os.fsync

    def full(fd):  # the disk fills as RESULTS.md's temporary file is written
        if ".RESULTS.md.tmp-" in os.readlink(f"/proc/self/fd/{fd}"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd)
    monkeypatch.setattr(os, "fsync", full)
    page = (results_copy / "RESULTS.md").read_bytes()
    before = files_in(results_copy)
    code, lines, _ = refusal(capsys, results.main, [])
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith("results.py: error: no space left on the disk of ") and "RESULTS.md" in lines[0]
    assert " free)" in lines[0] and "Traceback" not in lines[0]
    assert files_in(results_copy) == before and (results_copy / "RESULTS.md").read_bytes() == page
    assert not list(results_copy.rglob(".*.tmp-*"))
