"""One naming for "where is op X" (#12 item 5): in acme, an op's spec family, its spec
file and the kernel file that defines it carry the same name, and `flsdk ops` shows all three."""

from pathlib import Path

from flsdk.cli import main, op_statuses

ROOT = Path(__file__).resolve().parents[1]
ACME = ROOT / "examples" / "acme_backend"


def test_every_acme_kernel_lives_in_the_file_named_after_its_spec_family():
    rows = [r for r in op_statuses(ACME) if r.get("spec")]
    assert len(rows) > 300
    misplaced = [(r["op"], r["family"], r["kernel"]) for r in rows
                 if r["status"] == "native" and Path(r["kernel"]).stem != r["family"]]
    assert misplaced == []
    wrong_file = [(r["op"], r["spec"]) for r in rows
                  if Path(r["spec"].rsplit(":", 1)[0]).stem != r["family"]]
    assert wrong_file == []


def test_flsdk_ops_shows_spec_kernel_and_status_of_one_op(capsys, monkeypatch):
    monkeypatch.chdir(ACME)
    assert main(["ops", "--op", "max_pool2d_with_indices"]) == 0
    out = capsys.readouterr().out.splitlines()
    row = next(line for line in out if line.startswith("max_pool2d_with_indices "))
    assert row.split()[1:4] == ["pool", "native", "kernels/pool.cpp"]
    assert row.split()[4].startswith("../../opspec/pool.yaml:")
