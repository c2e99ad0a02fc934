"""The config search's command line: bad arguments are refused by name before the GPU is
touched (the search itself runs on a GPU and is not timed here)."""

import pytest

from mla_kernels.lab import tune


@pytest.mark.parametrize(("args", "message"), [
    (["--designs", "auto"], "--designs: expected designs among ['chunked', 'hopper_ws', "
                            "'serial', 'tiled'], got ['auto']"),
    (["--designs", "tiled", "nope"], "got ['nope']"),
    (["--sequence", "-1"], "--sequence: expected a count of calls >= 0, got -1"),
    (["--configs", '{"ring_depth": 4}'], "--configs: expected a JSON list of config mappings"),
])
def test_bad_arguments_are_refused_by_name(args, message, capsys, monkeypatch):
    def no_gpu():
        raise AssertionError("the ceilings were measured before the arguments were checked")

    monkeypatch.setattr(tune.bench, "measure_ceilings", no_gpu)
    with pytest.raises(SystemExit) as exc:
        tune.main(["rows.csv", *args])
    assert exc.value.code == 2
    assert message in capsys.readouterr().err
