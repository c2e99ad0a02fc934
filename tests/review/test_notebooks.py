"""The notebooks and the batch run: sources without outputs, a parameters cell papermill
overrides, every notebook executed in the CPU configuration with its figures and CSVs, a
replot from a CSV fixture, and a failing notebook that does not stop the others."""

import json
import os
import shutil
import tarfile
from pathlib import Path

import nbformat
import pandas as pd
import papermill as pm
import pytest
import torch

from mla_kernels import DESIGNS
from mla_kernels.core import devices
from mla_kernels.lab import compile_check, occupancy
from mla_kernels.review import analysis, params, report

ROOT = Path(__file__).parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
FIXTURE = Path(__file__).parent / "fixtures" / "measurements_sample.csv"
# Knobs every notebook takes; each notebook adds its own.
COMMON_KNOBS = {"shape", "cache_dtype", "weight_format", "block_size", "contexts", "batch",
                "ragged_contexts", "variants", "device", "mode", "data_dir", "out_dir"}
FIGURES = {"01_occupancy": ["occupancy"], "02_context_sweep": ["context_sweep"],
           "03_roofline": ["bandwidth", "roofline", "peaks"], "04_formats": ["formats"],
           "05_context_path": ["context_crossover", "context_memory"]}
ALWAYS_CSV = {"01_occupancy": ["occupancy.csv", "occupancy_ragged.csv"],
              "02_context_sweep": ["correctness.csv"],
              "03_roofline": ["bytes_flops_model.csv"], "04_formats": [],
              "05_context_path": ["context_floors.csv", "context_crossover.csv",
                                  "context_thresholds.csv"]}
# Notebooks that draw from the floors where no measured rows are: their figures always come.
MODEL_FALLBACK = {"01_occupancy", "05_context_path"}
REPLOT_CSV = {"02_context_sweep": ["speedup_table.csv"],
              "03_roofline": ["roof_fraction.csv"]}
PROVENANCE = {"device", "torch", "triton", "commit"}


def outputs_text(path: Path) -> str:
    nb = nbformat.read(str(path), as_version=4)
    out = []
    for c in nb.cells:
        for o in c.get("outputs", []):
            out.append(o.get("text", "") or json.dumps(o.get("data", {})))
    return "\n".join(out)


def cfg_variants() -> list[str]:
    return report.load_config("cpu")["parameters"]["variants"]


def committed_h200_rows() -> bool:
    rows = analysis.select(analysis.load_measurements(ROOT / "data" / "h200", ["context_sweep"]),
                           shape="kimi-k3-tp8", cache_dtype="fp8", weight_format="fp8_row",
                           block_size=1, batch="single", timing=None)
    return not rows.empty


# ------------------------------------------------------------------ the sources
def test_there_are_five_notebooks():
    assert [p.stem for p in NOTEBOOKS] == list(FIGURES)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_source_notebooks_carry_no_outputs(path):
    nb = nbformat.read(str(path), as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, cell.source[:60]
    assert nb.metadata.kernelspec.name == "python3"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_parameters_cell_holds_every_knob(path):
    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    tagged = [c for c in nb.cells if "parameters" in c.metadata.get("tags", [])]
    assert len(tagged) == 1 and tagged[0] is code[0]
    declared = pm.inspect_notebook(str(path))
    knobs = {"04_formats": COMMON_KNOBS - {"cache_dtype", "weight_format", "contexts", "batch",
                                           "ragged_contexts"},
             # One sequence, page size 1, two fixed ways instead of designs.
             "05_context_path": COMMON_KNOBS - {"block_size", "batch", "ragged_contexts",
                                                "variants"}}.get(path.stem, COMMON_KNOBS)
    assert knobs <= set(declared), knobs - set(declared)
    # Every parameter is one the package checks (mla_kernels.review.params.SPECS).
    from mla_kernels.review.params import SPECS

    assert set(declared) <= set(SPECS), set(declared) - set(SPECS)
    # Every knob is commented: the parameters cell is the notebook's documentation.
    assert all(p["help"] for p in declared.values()), [k for k, p in declared.items()
                                                       if not p["help"]]


@pytest.mark.parametrize("config", ["cpu", "h200"])
def test_configs_name_only_declared_parameters(config, tmp_path):
    cfg = report.load_config(config)
    for path in NOTEBOOKS:
        params = report.notebook_parameters(cfg, path, tmp_path)
        assert params["out_dir"] == str(tmp_path)
        # Relative paths are the notebook's to resolve, from the repository root.
        from mla_kernels.review.params import checked

        assert checked(params)["data_dir"].startswith(str(ROOT))
        # On the H200 the formats notebook draws the matrix the same call measured first; the
        # context path's draws the committed map (its own run is the map's command).
        replot = config == "cpu" or path.stem in ("04_formats", "05_context_path")
        assert params["mode"] == ("replot" if replot else "measure")
    report.check_shared_parameters(cfg, NOTEBOOKS)  # no shared typo


def test_a_misspelt_parameter_is_an_error(tmp_path):
    cfg = report.load_config("cpu")
    cfg["notebooks"]["01_occupancy.ipynb"]["contxts"] = [1]
    with pytest.raises(ValueError, match="contxts"):
        report.notebook_parameters(cfg, NOTEBOOKS[0], tmp_path)


def test_default_config():
    gpu = torch.cuda.is_available() and "H200" in torch.cuda.get_device_name(0)
    assert report.default_config() == ("h200" if gpu else "cpu")


# ------------------------------------------------------------------ the CPU batch
@pytest.fixture(scope="module")
def cpu_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("report-cpu")
    out_dir, results = report.run_report("cpu", out=out, cell_progress=False)
    return out_dir, results


@pytest.mark.slow
def test_cpu_batch_executes_every_notebook(cpu_report):
    out_dir, results = cpu_report
    assert [r.notebook for r in results] == [p.name for p in NOTEBOOKS]
    assert all(r.ok for r in results), [r.error for r in results]
    for p in NOTEBOOKS:
        assert (out_dir / "notebooks" / p.name).is_file()
        html = (out_dir / "html" / f"{p.stem}.html").read_text()
        title = nbformat.read(str(p), as_version=4).cells[0].source.splitlines()[0]
        assert "<html" in html and title.lstrip("# ").split(" ", 2)[-1][:12] in html
    summary = json.loads((out_dir / "summary.json").read_text())
    assert summary["config"] == "cpu" and len(summary["notebooks"]) == len(NOTEBOOKS)


@pytest.mark.slow
def test_cpu_batch_wrote_figures_and_csvs(cpu_report):
    out_dir, _ = cpu_report
    have_data = committed_h200_rows()
    for stem, names in FIGURES.items():
        measured = stem not in MODEL_FALLBACK
        for name in names:
            made = [(out_dir / "figures" / f"{name}.{ext}").is_file() for ext in ("png", "svg")]
            assert made == [not measured or have_data] * 2, (stem, name)
        for csv in ALWAYS_CSV[stem] + (REPLOT_CSV.get(stem, []) if have_data else []):
            df = pd.read_csv(out_dir / "data" / csv)
            assert not df.empty, csv
            assert PROVENANCE <= set(df.columns), (csv, PROVENANCE - set(df.columns))
    # Atomic writes leave no temp files behind.
    for sub in ("figures", "data", "html"):
        assert not [p for p in (out_dir / sub).iterdir() if p.name.startswith(".")]


@pytest.mark.slow
def test_cpu_batch_checked_the_kernels_and_modelled_both_devices(cpu_report, device):
    out_dir, _ = cpu_report
    checks = pd.read_csv(out_dir / "data" / "correctness.csv")
    assert checks["correct"].all() and (checks["device"] == device).all()
    # Every configured design this machine can run; the sm_90-only Gluon design is left out.
    assert "hopper_ws" in cfg_variants()
    assert set(checks["variant"]) == set(cfg_variants()) - {"hopper_ws"}
    # auto is checked as what it runs here: the portable fallback, not the sm_90 design.
    assert set(checks[checks.variant == "auto"]["design"]) == {"tiled"}
    assert (checks[checks.variant == "chunked"]["max_abs_diff"] == 0).all()
    occ = pd.read_csv(out_dir / "data" / "occupancy.csv")
    assert set(occ["device"]) == {"MI355X", "H200"}
    serial = occ[(occ.device == "MI355X") & (occ.variant == "serial")]
    assert (serial["programs_launched"] == 12).all()
    assert serial["busy_share"].round(3).eq(0.047).all()


@pytest.mark.slow
def test_cpu_batch_models_the_mi355x_from_its_compiler(cpu_report):
    # The MI355X rows of the occupancy model hold the programs per CU that triton's AMD
    # compiler's registers and LDS allow, not the fallback of one program per compute unit.
    missing = compile_check.amd_backend_missing()
    if missing:
        pytest.skip(missing)
    out_dir, _ = cpu_report
    assert "no AMD compile here" not in outputs_text(out_dir / "notebooks" / "01_occupancy.ipynb")
    amd = pd.read_csv(out_dir / "data" / "resources_amd.csv")
    prob = occupancy.problem_for("kimi-k3-tp8", [300])
    runs = {v for v in cfg_variants() if v == "auto" or DESIGNS[v].runs(prob, devices.DEVICES["MI355X"])}
    assert set(amd["device"]) == {"MI355X"} and set(amd["variant"]) == runs
    assert (amd["vgprs"] > 0).all() and (amd["sgprs"] > 0).all() and (amd["lds_bytes"] > 0).all()
    occ = pd.read_csv(out_dir / "data" / "occupancy.csv")
    mi = occ[occ.device == "MI355X"]
    for r in amd.itertuples():
        got = set(mi[mi.variant == r.variant]["resident_per_cu"])
        assert got == {max(1, int(r.resident_per_cu))}, (r.variant, got, r.resident_per_cu)
    assert (mi["resident_per_cu"] > 1).any()


@pytest.mark.slow
def test_papermill_injected_the_configuration(cpu_report):
    out_dir, _ = cpu_report
    cfg = report.load_config("cpu")
    for p in NOTEBOOKS:
        nb = nbformat.read(str(out_dir / "notebooks" / p.name), as_version=4)
        tags = [c.metadata.get("tags", []) for c in nb.cells]
        i = next(i for i, t in enumerate(tags) if "parameters" in t)
        injected = nb.cells[i + 1]
        assert "injected-parameters" in tags[i + 1]
        # The notebooks write beside the report folder, each into a folder of its own; the
        # runner moves what they wrote.
        assert f'out_dir = "{report.staging_dirs(out_dir)[0] / p.stem}"' in injected.source
        own = cfg["notebooks"][p.name]
        if "contexts" in own:
            assert f"contexts = {own['contexts']}" in injected.source


# ------------------------------------------------------------------ replot from a fixture
@pytest.fixture(scope="module")
def fixture_report(tmp_path_factory):
    data = tmp_path_factory.mktemp("fixture-data")
    for name in ("context_sweep.csv", "roofline.csv", "formats.csv"):  # as a run writes them
        shutil.copy(FIXTURE, data / name)
    out = tmp_path_factory.mktemp("report-fixture")
    overrides = {"data_dir": str(data), "check_contexts": [], "check_ragged": [],
                 "contexts": [4096, 32000, 65536, 109440],
                 # The fixture holds one cache and weight format: the formats figure asks
                 # for those (a format it lacks is an error, named).
                 "caches": ["fp8"], "weight_formats": ["fp8_row"]}
    return report.run_report("cpu", out=out, overrides=overrides, cell_progress=False)


@pytest.mark.slow
def test_replot_renders_every_figure_from_the_fixture(fixture_report):
    out_dir, results = fixture_report
    assert all(r.ok for r in results), [r.error for r in results]
    for names in FIGURES.values():
        for name in names:
            assert (out_dir / "figures" / f"{name}.png").stat().st_size > 10_000
            assert (out_dir / "figures" / f"{name}.svg").is_file()
    fx = pd.read_csv(FIXTURE)
    fx = fx[(fx.batch == 1) & fx.config.isna() & (fx.timing == "flushed")]
    table = pd.read_csv(out_dir / "data" / "speedup_table.csv")
    for _, r in table.iterrows():
        s = fx[(fx.ctx == r.ctx) & (fx.variant == "serial")].median_us.iloc[0]
        c = fx[(fx.ctx == r.ctx) & (fx.variant == "chunked")].median_us.iloc[0]
        assert r.before_ms == pytest.approx(s / 1e3) and r.speedup == pytest.approx(s / c)
    ragged = pd.read_csv(out_dir / "data" / "ragged_table.csv").set_index("variant")
    assert ragged.loc["chunked", "median_us"] == 930.0  # the fixture's ragged row
    roof = pd.read_csv(out_dir / "data" / "roof_fraction.csv")
    assert roof.set_index("ctx").loc[32000, "chunked"] == pytest.approx(
        fx[(fx.ctx == 32000) & (fx.variant == "chunked")].roof_fraction.iloc[0], abs=1e-3)
    # The -p override reached the notebooks: the occupancy model ran at exactly these.
    occ = pd.read_csv(out_dir / "data" / "occupancy.csv")
    assert sorted(set(occ["ctx"])) == [4096, 32000, 65536, 109440]


# ------------------------------------------------------------------ failures and archives
def _tiny_notebook(path: Path, body: str) -> None:
    nb = nbformat.v4.new_notebook(metadata={"kernelspec": {"name": "python3",
                                                           "display_name": "Python 3",
                                                           "language": "python"}})
    params = nbformat.v4.new_code_cell('out_dir = "."')
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, nbformat.v4.new_code_cell("from pathlib import Path"),
                nbformat.v4.new_code_cell(body)]
    nbformat.write(nb, str(path))


@pytest.mark.slow
def test_a_failing_notebook_does_not_stop_the_others(tmp_path, capsys):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _tiny_notebook(nbs / "01_first.ipynb", "Path(out_dir, 'first.txt').write_text('1')")
    _tiny_notebook(nbs / "02_broken.ipynb", "raise ValueError('boom')")
    _tiny_notebook(nbs / "03_last.ipynb", "Path(out_dir, 'last.txt').write_text('3')")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("parameters: {}\nnotebooks: {}\n")
    out = tmp_path / "out"
    rc = report.main(["--config", str(cfg), "--out", str(out), "--notebook-dir", str(nbs),
                      "--no-cell-progress", "--archive", str(tmp_path / "rep")])
    captured = capsys.readouterr()
    assert rc == 1
    assert (out / "first.txt").is_file() and (out / "last.txt").is_file()
    assert "02_broken.ipynb" in captured.err and "ValueError: boom" in captured.err
    assert "cell 3" in captured.err  # injected parameters are cell 1; the raise is cell 3
    assert "FAILED 02_broken.ipynb" in captured.out and str(out) in captured.out
    # The failed notebook is still reviewable, beside the report, and named where it is.
    assert (tmp_path / "out.failed" / "html" / "02_broken.html").is_file()
    assert not (out / "html" / "02_broken.html").exists()
    assert str(tmp_path / "out.failed") in captured.err
    with tarfile.open(tmp_path / "rep.tar.gz") as tar:
        names = tar.getnames()
    assert "out.failed/notebooks/02_broken.ipynb" in names and "out/summary.json" in names


@pytest.mark.slow
def test_measure_path_against_a_stand_in_harness(tmp_path, monkeypatch):
    # The GPU path, checked here so a slip in it does not cost a device run: the kernel
    # gets a stand-in GPU and harness (tests/review/fixtures/fake_gpu/sitecustomize.py).
    # Prepended: a PYTHONPATH naming the tree under test (a second checkout) stays.
    fake = str(Path(__file__).parent / "fixtures" / "fake_gpu")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [fake, os.environ.get("PYTHONPATH")])))
    monkeypatch.setenv("MLA_FAKE_GPU", "1")
    # The runner checks for a GPU before a notebook measures: the same stand-in here.
    monkeypatch.setattr(devices, "live_device", lambda index=0: devices.DEVICES["H200"])
    out_dir, results = report.run_report(
        "h200", out=tmp_path, notebooks=["02", "03", "04"], cell_progress=False,
        # Tiny sizes: the bit-identity check of the measure path runs the kernels here.
        # mode: the formats notebook measures too (on the H200 it draws the matrix).
        overrides={"contexts": [5, 40], "ragged_contexts": [3, 7],
                   "check_contexts": [3], "check_ragged": [], "mode": "measure"})
    assert all(r.ok for r in results), [r.error for r in results]
    sweep = pd.read_csv(out_dir / "data" / "context_sweep.csv")
    assert {"serial", "chunked", "tiled", "torch_bf16"} <= set(sweep["variant"])
    assert set(sweep["timing"]) == {"flushed", "graph"}  # h200: plain calls and device time
    assert sorted(set(sweep[sweep.batch == 1]["ctx"])) == [5, 40]
    assert (sweep[sweep.batch == 2]["contexts"] == "3 7").all()
    ident = pd.read_csv(out_dir / "data" / "identity.csv")
    assert (ident[ident.variant == "chunked"]["max_abs_diff"] == 0).all()
    table = pd.read_csv(out_dir / "data" / "speedup_table.csv")
    assert list(table["max_abs_diff"]) == [0.0, 0.0]
    assert not pd.read_csv(out_dir / "data" / "ceilings.csv").empty
    for name in ("context_sweep", "bandwidth", "roofline", "peaks", "formats"):
        assert (out_dir / "figures" / f"{name}.png").is_file()
    formats = pd.read_csv(out_dir / "data" / "formats.csv")
    assert set(formats["weight_format"]) == {"bf16", "fp8_row", "fp8_block", "mxfp4"}
    assert set(formats["cache_dtype"]) == {"fp8", "bf16"}
    for csv in (out_dir / "data").glob("*.csv"):
        assert PROVENANCE <= set(pd.read_csv(csv).columns), csv.name


# ------------------------------------------------------------------ configurations
@pytest.mark.parametrize(("text", "words"), [
    ("name: cpu\nparameters: {}\n", ["name", "named by its file"]),
    ("parameters: {shape: kimi-k3-tp8, contxts: [1]}\n", ["contxts", "declared by no"]),
    ("parameters: [1, 2]\n", ["parameters", "expected a mapping"]),
    ("- 1\n- 2\n", ["expected a mapping", "list"]),
    ("parameters: {a: [1, 2\n", ["expected YAML"]),
])
def test_a_bad_configuration_is_one_line_naming_it(text, words, tmp_path, capsys):
    cfg = tmp_path / "mine.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    rc = report.main(["--config", str(cfg), "--out", str(tmp_path / "out"),
                      "--no-cell-progress"])
    err = capsys.readouterr().err
    assert rc == 2, err
    for w in words:
        assert w in err, (w, err)
    assert "Traceback" not in err


def test_a_copied_configuration_is_named_by_its_file(tmp_path):
    cfg = tmp_path / "my-run.yaml"
    cfg.write_text((ROOT / "configs" / "cpu.yaml").read_text())
    assert report.load_config(str(cfg))["name"] == "my-run"


@pytest.mark.slow
def test_earlier_results_stay_until_new_ones_are_written(tmp_path):
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    _tiny_notebook(nbs / "01_a.ipynb", "Path(out_dir, 'a.txt').write_text('run 1')")
    _tiny_notebook(nbs / "02_b.ipynb", "Path(out_dir, 'b.txt').write_text('run 1')")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("parameters: {}\n")
    out = tmp_path / "out"
    _, results = report.run_report(str(cfg), out=out, notebook_dir=nbs, cell_progress=False)
    assert all(r.ok for r in results)
    html_before = (out / "html" / "02_b.html").read_bytes()
    _tiny_notebook(nbs / "01_a.ipynb", "Path(out_dir, 'a.txt').write_text('run 2')")
    # Fails after writing part of its outputs: none of them reaches the report.
    _tiny_notebook(nbs / "02_b.ipynb", "Path(out_dir, 'b.txt').write_text('run 2')\n"
                                       "raise RuntimeError('broken now')")
    _, results = report.run_report(str(cfg), out=out, notebook_dir=nbs, cell_progress=False)
    assert [r.ok for r in results] == [True, False]
    assert (out / "a.txt").read_text() == "run 2"
    assert (out / "b.txt").read_text() == "run 1"  # the failed notebook's earlier result
    assert (out / "html" / "02_b.html").read_bytes() == html_before  # not the failed HTML
    failed = tmp_path / "out.failed"
    assert (failed / "b.txt").read_text() == "run 2"
    assert "broken now" in (failed / "html" / "02_b.html").read_text()
    assert results[1].html == str(failed / "html" / "02_b.html")
    summary = json.loads((out / "summary.json").read_text())
    assert "a.txt" in summary["written"] and "b.txt" in summary["kept_from_earlier"]
    assert summary["failed_outputs"]["folder"] == str(failed)
    assert not (tmp_path / "out.incoming").exists()  # nothing left beside it
    # A run with no failure clears the failed outputs.
    _tiny_notebook(nbs / "02_b.ipynb", "Path(out_dir, 'b.txt').write_text('run 3')")
    _, results = report.run_report(str(cfg), out=out, notebook_dir=nbs, cell_progress=False)
    assert all(r.ok for r in results) and (out / "b.txt").read_text() == "run 3"
    assert not failed.exists()


@pytest.mark.slow
def test_notebooks_beside_the_others_run_at_once_and_keep_their_outputs(tmp_path):
    # 01 waits for a file that 03 writes: run one after the other, 01 would time out.
    nbs = tmp_path / "nbs"
    nbs.mkdir()
    marker = tmp_path / "marker"
    _tiny_notebook(nbs / "01_waits.ipynb", "import time\n"
                   f"end = time.time() + 120\n"
                   f"while not Path({str(marker)!r}).exists() and time.time() < end:\n"
                   "    time.sleep(0.1)\n"
                   f"assert Path({str(marker)!r}).exists(), 'ran alone'\n"
                   "Path(out_dir, 'waits.txt').write_text('1')")
    _tiny_notebook(nbs / "02_broken.ipynb", "Path(out_dir, 'broken.txt').write_text('2')\n"
                   "raise ValueError('boom')")
    _tiny_notebook(nbs / "03_beside.ipynb", f"Path({str(marker)!r}).write_text('3')\n"
                   "Path(out_dir, 'beside.txt').write_text('3')")
    cfg = tmp_path / "tiny.yaml"
    cfg.write_text("parameters: {}\n")
    out = tmp_path / "out"
    _, results = report.run_report(str(cfg), out=out, notebook_dir=nbs, cell_progress=False,
                                   beside={"03_beside.ipynb"})
    assert [r.notebook for r in results] == ["01_waits.ipynb", "02_broken.ipynb",
                                             "03_beside.ipynb"]
    assert [r.ok for r in results] == [True, False, True], [r.error for r in results]
    assert (out / "waits.txt").is_file() and (out / "beside.txt").is_file()
    assert (out / "html" / "03_beside.html").is_file()
    assert results[2].html == str(out / "html" / "03_beside.html")
    assert (tmp_path / "out.failed" / "broken.txt").is_file() and not (out / "broken.txt").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert {"waits.txt", "beside.txt", "notebooks/03_beside.ipynb"} <= set(summary["written"])
    assert "broken.txt" in summary["failed_outputs"]["files"]
    assert not (tmp_path / "out.incoming").exists()


def test_only_gpu_free_replots_run_beside_the_others():
    # What runs beside the measuring notebooks must launch nothing on the GPU when it
    # re-plots: every call that reaches a kernel or a compiled one sits in its measure path.
    gpu_calls = {"check_variants", "run_points", "measure_resources", "compiled_resources",
                 "measure_ceilings", "gather_kv_b_proj", "run"}

    def gpu_free(path: Path) -> bool:
        import ast

        nb = nbformat.read(str(path), as_version=4)
        src = "\n".join(c.source for c in nb.cells if c.cell_type == "code")

        def measure_only(node) -> bool:
            return (isinstance(node, ast.FunctionDef) and node.name == "measure") or (
                isinstance(node, ast.If) and "mode == 'measure'" in ast.unparse(node.test)
                .replace('"', "'"))

        def walk(node, guarded=False) -> bool:
            guarded = guarded or measure_only(node)
            if isinstance(node, ast.Call) and not guarded:
                f = node.func
                name = f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", "")
                if name in gpu_calls:
                    return False
            return all(walk(c, guarded) for c in ast.iter_child_nodes(node))
        return walk(ast.parse(src))

    by_name = {p.name: p for p in NOTEBOOKS}
    assert report.BESIDE and report.BESIDE <= set(by_name)
    for name in report.BESIDE:
        assert gpu_free(by_name[name]), name
    # The sweep checks kernels even when it re-plots, the occupancy notebook compiles them.
    assert not gpu_free(by_name["02_context_sweep.ipynb"])
    assert not gpu_free(by_name["01_occupancy.ipynb"])
    nb = by_name["04_formats.ipynb"]
    assert report.runs_beside(nb, {"mode": "replot"})
    assert not report.runs_beside(nb, {"mode": "measure"})
    assert not report.runs_beside(by_name["03_roofline.ipynb"], {"mode": "replot"})


@pytest.mark.slow
def test_html_is_self_contained(cpu_report):
    out_dir, _ = cpu_report
    import re

    for html in (out_dir / "html").glob("*.html"):
        text = html.read_text()
        assert not re.findall(r'(?:src|href)="https?://', text), html.name
        assert not re.findall(r"from\s+['\"]https?://", text), html.name
        assert '<img src="data:image/png;base64,' in text or "data:image/png" in text
        # Titled by notebook and run, not nbconvert's "Notebook".
        assert f"<title>{html.stem}: configuration cpu, code at commit " in text, html.name


# ------------------------------------------------------------------ papermill from anywhere
@pytest.mark.slow
def test_papermill_from_another_folder_finds_the_data(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # not the repository, not notebooks/
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    out = tmp_path / "out"
    pm.execute_notebook(str(ROOT / "notebooks" / "03_roofline.ipynb"), str(tmp_path / "x.ipynb"),
                        parameters={"out_dir": str(out)}, kernel_name="python3",
                        progress_bar=False)
    # The committed rows are found from another folder: the figure and no "no measurements".
    assert committed_h200_rows(), "no committed H200 context-sweep rows under data/h200/"
    assert (out / "figures" / "roofline.png").is_file()
    assert "no measurements" not in outputs_text(tmp_path / "x.ipynb")
    assert not (tmp_path / "reports").exists()


@pytest.mark.parametrize(("name", "value", "words"), [
    ("contexts", [1024, -5], ["contexts", "ints >= 1", "-5"]),
    ("batch", "both", ["batch", "ragged", "both"]),
    ("variants", ["serial", "fastest"], ["variants", "fastest"]),
    ("block_size", 0, ["block_size", ">= 1", "0"]),
    ("mode", "plot", ["mode", "replot", "plot"]),
    ("torch_paths", "yes", ["torch_paths", "True or False"]),
    ("data_dir", 3, ["data_dir", "path"]),
])
def test_a_bad_parameter_is_a_value_error_naming_it(name, value, words):
    with pytest.raises(ValueError) as err:
        params.checked({name: value})
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_list_parameters_take_what_papermill_passes():
    got = params.checked({"variants": '["serial","tiled"]', "contexts": 1024,
                          "check_contexts": "[1, 40]", "ragged_contexts": "[]",
                          "design_graphs": "true", "data_dir": "data/h200"})
    assert got["variants"] == ["serial", "tiled"] and got["contexts"] == [1024]
    assert got["check_contexts"] == [1, 40] and got["ragged_contexts"] == []
    assert got["design_graphs"] is True and got["data_dir"] == str(ROOT / "data" / "h200")


@pytest.mark.slow
def test_a_notebook_rejects_a_bad_parameter_at_its_start(tmp_path):
    with pytest.raises(pm.PapermillExecutionError, match="contexts: expected"):
        pm.execute_notebook(str(ROOT / "notebooks" / "01_occupancy.ipynb"),
                            str(tmp_path / "x.ipynb"), kernel_name="python3",
                            parameters={"contexts": [1024, -5], "out_dir": str(tmp_path)},
                            progress_bar=False)


# ------------------------------------------------------------------ bad input: one policy
# Every entry point answers a bad argument, configuration or parameter with a ValueError
# naming it, what it expects and what it got; the runner says it in one line on stderr and
# exits 2, before creating anything.
def _one_line_error(argv: list[str], capsys) -> str:
    rc = report.main([*argv, "--no-cell-progress"])
    captured = capsys.readouterr()
    assert rc == 2, captured.err
    assert captured.err.startswith("error: ") and captured.err.count("\n") == 1, captured.err
    assert "Traceback" not in captured.err and captured.out == ""  # nothing ran
    return captured.err


@pytest.mark.parametrize(("argv", "words"), [
    (["-p", "contexts=[1,2"], ["-p contexts", "expected a YAML value", "[1,2"]),
    (["-p", "contexts"], ["-p", "KEY=VALUE", "'contexts'"]),
    (["-p", "no_such_param=3"], ["-p no_such_param", "a parameter of the notebooks run", "3"]),
    (["-p", "timing=flushed"], ["-p timing", "flushed"]),  # declared by no notebook
    (["-p", "contexts=[1024, -5]"], ["-p contexts", "ints >= 1", "-5"]),
    (["-p", "variants=fastest"], ["-p variants", "fastest"]),
    (["-p", "block_size=\u00b2"], ["-p block_size", "an int >= 1", "'\u00b2'"]),
    (["-p", "block_size=--5"], ["-p block_size", "an int >= 1", "'--5'"]),
    (["-p", "ctx=" + "9" * 5000], ["-p ctx", "expected a YAML value", "characters)"]),
    (["-p", "ctx='" + "9" * 5000 + "'"], ["-p ctx", "an int >= 1", "characters)"]),
    (["-p", "variants={a: 1, a: 2}"], ["-p variants", "expected a YAML value", "twice"]),
    (["--notebooks", "04", "-p", "contexts=[4096]"], ["-p contexts", "notebooks run"]),
    (["-p", "out_dir=elsewhere"], ["out_dir", "--out", "elsewhere"]),
    (["--notebooks", "99"], ["--notebooks", "'99'", "01_occupancy"]),
    (["--notebooks", "02", "99"], ["--notebooks", "['99']"]),
    (["--config", "no-such-config"], ["--config", "no-such-config", "cpu"]),
])
def test_a_bad_argument_is_one_line_and_creates_nothing(argv, words, tmp_path, capsys):
    out = tmp_path / "out"
    err = _one_line_error([*argv, "--out", str(out)], capsys)
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_a_bad_archive_path_is_found_before_the_run(tmp_path, capsys):
    err = _one_line_error(["--out", str(tmp_path / "out"), "--archive",
                           str(tmp_path / "no" / "such" / "rep")], capsys)
    assert "--archive" in err and "no folder" in err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("text", "argv", "words"), [
    # A shared typo is one whichever notebooks run.
    ("parameters: {contxts: [1]}\n", ["--notebooks", "03"], ["contxts", "declared by no"]),
    ("notebooks: {03_rooflin.ipynb: {contexts: [4096]}}\n", [],
     ["notebooks", "03_rooflin.ipynb", "03_roofline.ipynb"]),
    ("notebooks: {03_roofline.ipynb: {context: [4096]}}\n", [],
     ["03_roofline.ipynb", "'context'", "contexts"]),
    ("notebooks: {03_roofline.ipynb: [4096]}\n", [], ["03_roofline.ipynb", "a mapping"]),
    ("notebooks: {03_roofline.ipynb: {contexts: [0]}}\n", [],
     ["03_roofline.ipynb", "contexts", "ints >= 1", "[0]"]),
    ("parameters: {shape: no-such-shape}\n", [], ["parameters", "shape", "no-such-shape"]),
    ("parameters: {out_dir: elsewhere}\n", [], ["out_dir", "--out"]),
    ("execution_timeout: soon\n", [], ["execution_timeout", "soon"]),
    ("parameters: {block_size: 1}\nparameters: {block_size: 2}\n", [],
     ["each key once", "'parameters' twice"]),
    ("parameters:\n  shape: kimi-k3-tp8\n  shape: kimi-k3-tp8\n", [], ["'shape' twice"]),
    (b"parameters: {shape: \xe9}\n", [], ["expected UTF-8 YAML", "0xe9"]),
])
def test_a_bad_configuration_names_its_file_as_given(text, argv, words, tmp_path, capsys):
    cfg = tmp_path / "mine.yaml"
    cfg.write_bytes(text if isinstance(text, bytes) else text.encode())
    out = tmp_path / "out"
    err = _one_line_error(["--config", str(cfg), "--out", str(out), *argv], capsys)
    for w in words:
        assert w in err, (w, err)
    assert str(cfg) in err and "configs/mine.yaml" not in err
    assert not out.exists()


def test_an_out_that_is_a_file_or_lies_under_one(tmp_path, capsys):
    file = tmp_path / "file"
    file.write_text("")
    assert "a file" in _one_line_error(["--out", str(file)], capsys)
    err = _one_line_error(["--out", str(file / "sub")], capsys)
    assert "it can create" in err and f"{file} is a file" in err


def test_an_out_this_user_cannot_write(tmp_path, capsys, monkeypatch):
    locked = tmp_path / "locked"
    locked.mkdir()
    real = os.access
    monkeypatch.setattr(os, "access",
                        lambda p, mode, **kw: Path(p) != locked and real(p, mode, **kw))
    err = _one_line_error(["--out", str(locked / "out")], capsys)
    assert "can write" in err and f"{locked} is not writable" in err
    assert not (locked / "out").exists()


def test_an_out_the_system_refuses_is_one_line_and_left_as_it_was(tmp_path, capsys,
                                                                    monkeypatch):
    # A read-only mount passes the permission check (root) and refuses a write: here the
    # folder the run writes beside the report, after the report folder was made.
    mkdir = Path.mkdir

    def refuse(self, *args, **kwargs):
        if self.name.endswith(".incoming"):
            raise PermissionError(30, "Read-only file system")
        return mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", refuse)
    out = tmp_path / "out"
    err = _one_line_error(["--out", str(out)], capsys)
    assert "--out" in err and "Read-only file system" in err
    assert not out.exists()


def _latest_run() -> Path:
    return max((p for p in (ROOT / "data" / "h200").iterdir()
                if (p / "perf_matrix.csv").is_file()), key=lambda p: p.name)


def test_measuring_needs_a_gpu(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(devices, "live_device", lambda index=0: None)
    out = tmp_path / "out"
    err = _one_line_error(["--config", "h200", "--out", str(out)], capsys)
    assert "mode" in err and "'measure'" in err and "configs/h200.yaml" in err
    assert "02_context_sweep.ipynb" in err and "04_formats" not in err  # 04 replots there
    err = _one_line_error(["-p", "mode=measure", "--notebooks", "3", "--out", str(out)],
                          capsys)
    assert "03_roofline.ipynb" in err and "-p mode=measure" in err
    assert not out.exists()
    # What replots needs none: the h200 configuration's formats notebook (its data_dir,
    # the matrix step's folder, here one committed run).
    matrix = tmp_path / "matrix"
    matrix.mkdir()
    shutil.copy(_latest_run() / "perf_matrix.csv", matrix / "perf_matrix_all.csv")
    plan = report.plan_report("h200", out=out, notebooks=["04"],
                              overrides={"data_dir": str(matrix)})
    assert [(p.name, v["mode"]) for p, v in plan.jobs] == [("04_formats.ipynb", "replot")]
    assert not out.exists()


def test_a_plan_checks_everything_and_creates_nothing(tmp_path):
    out = tmp_path / "a" / "b"
    plan = report.plan_report("cpu", out=out, overrides={"contexts": [4096]})
    assert [p for p, _ in plan.jobs] == NOTEBOOKS and plan.out_dir == out.resolve()
    assert all(v["out_dir"] == str(out.resolve()) for _, v in plan.jobs)
    assert [v.get("contexts") for _, v in plan.jobs] == [[4096]] * 3 + [None, [4096]]
    assert not (tmp_path / "a").exists()


# ------------------------------------------------------------------ injected names
def _parameters_cell(path: Path) -> str:
    nb = nbformat.read(str(path), as_version=4)
    return next(c.source for c in nb.cells if "parameters" in c.metadata.get("tags", []))


def _as_papermill_runs(path: Path, **injected) -> dict:
    """A notebook's globals at its first cell after papermill's, as IPython holds them: the
    input history (``In``) of the parameters cell, papermill's cell, and the current one."""
    from papermill.translators import PythonTranslator

    ns: dict = {}
    source = _parameters_cell(path)
    exec(source, {}, ns)  # the parameters cell's defaults
    ns.update(injected)
    ns["In"] = ["", source, PythonTranslator.codify(injected), "globals().update(...)"]
    return ns


@pytest.mark.parametrize(("name", "value"), [("no_such_param", 3), ("context", [4096]),
                                             ("timing", "flushed"), ("ctx", 4096)])
def test_a_name_the_notebook_does_not_declare_is_an_error(name, value):
    nb = ROOT / "notebooks" / "03_roofline.ipynb"
    with pytest.raises(ValueError) as err:
        params.checked_notebook(_as_papermill_runs(nb, **{name: value, "out_dir": "x"}))
    msg = str(err.value)
    assert msg.startswith(f"{name}: expected a parameter of this notebook, one of [")
    assert "'contexts'" in msg and msg.endswith(f"got {value!r}")


def test_declared_injected_names_pass_checked_and_converted():
    nb = ROOT / "notebooks" / "03_roofline.ipynb"
    got = params.checked_notebook(_as_papermill_runs(nb, contexts="[4096, 32000]", out_dir="x",
                                          PAPERMILL_INPUT_PATH="in.ipynb"))
    assert got["contexts"] == [4096, 32000] and got["out_dir"] == str(ROOT / "x")
    # Run by hand: nothing injected, nothing to tell apart.
    assert params.checked_notebook({"contexts": [4096]})["contexts"] == [4096]
    assert params.injected(["", "shape = 'x'\n", "print(shape)"]) == ([], [])


def test_measure_mode_without_a_gpu_names_mode(monkeypatch):
    monkeypatch.setattr(devices, "live_device", lambda index=0: None)
    with pytest.raises(ValueError, match=r"^mode: expected 'replot' on a machine with no GPU"):
        params.checked_notebook({"mode": "measure"})
    params.checked_notebook({"mode": "replot"})
    monkeypatch.setattr(devices, "live_device", lambda index=0: devices.DEVICES["H200"])
    assert params.checked_notebook({"mode": "measure"})["mode"] == "measure"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_declared_parameter_is_read_by_a_later_cell(path):
    import ast

    nb = nbformat.read(str(path), as_version=4)
    code = [c for c in nb.cells if c.cell_type == "code"]
    source = _parameters_cell(path)
    # What params.injected takes as declared is what papermill reads from the cell, and the
    # cell cannot pass for papermill's own.
    assert params.assigned(source) == list(pm.inspect_notebook(str(path)))
    assert not source.lstrip().startswith(params.INJECTED_HEADER)
    read = {n.id for c in code[1:] for n in ast.walk(ast.parse(c.source))
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    unread = [n for n in params.assigned(source) if n not in read]
    assert not unread, f"{path.stem} declares parameters no later cell reads: {unread}"
    # The first cell after the parameters cell starts with params.checked_notebook, names checked.
    assert "params.checked_notebook(globals())" in code[1].source


def test_every_checked_name_is_a_parameter_of_some_notebook():
    declared = set().union(*(pm.inspect_notebook(str(p)) for p in NOTEBOOKS))
    assert set(params.SPECS) <= declared, set(params.SPECS) - declared


@pytest.mark.slow
def test_papermill_stops_on_a_name_the_notebook_does_not_declare(tmp_path):
    # In a real kernel: the typo of `contexts`, ignored before, ends the run named.
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"context: expected a parameter of this notebook"):
        pm.execute_notebook(str(ROOT / "notebooks" / "03_roofline.ipynb"),
                            str(tmp_path / "x.ipynb"), kernel_name="python3",
                            parameters={"context": [4096], "out_dir": str(tmp_path)},
                            progress_bar=False)


# ------------------------------------------------------------------ data a figure needs
def _fixture_rows(tmp_path: Path) -> pd.DataFrame:
    shutil.copy(FIXTURE, tmp_path / "roofline.csv")
    return analysis.load_measurements(tmp_path, ["roofline"])


WHERE = {"shape": "kimi-k3-tp8", "cache_dtype": "fp8", "weight_format": "fp8_row",
         "block_size": 1, "timing": None, "device": "auto"}


@pytest.mark.parametrize(("where", "words"), [
    ({"batch": "single", "require": {"contexts": ("ctx", [1024, 4096, 5000])}},
     ["contexts: expected contexts present in", "got 1024, 5000",
      "(there: 4096, 32000, 65536, 109440)"]),
    ({"batch": "single", "device": "MI355X"},
     ["device:", "'MI355X'", "there: NVIDIA H200 (synthetic fixture)"]),
    ({"batch": "single", "cache_dtype": "bf16"}, ["cache_dtype:", "'bf16'", "there: fp8"]),
    ({"batch": "ragged", "ragged_contexts": [5, 7]},
     ["ragged_contexts:", "'5 7'", "there: 1024 2048 4096"]),
    ({"batch": "single", "variants": ["hopper_ws"]}, ["variants:", "hopper_ws", "serial"]),
    ({"batch": "single", "require": {"caches": ("cache_dtype", ["fp8", "bf16"])}},
     ["caches:", "got bf16", "there: fp8"]),
])
def test_missing_data_names_what_is_missing_and_what_is_there(where, words, tmp_path):
    with pytest.raises(ValueError) as err:
        analysis.require_rows(_fixture_rows(tmp_path), data_dir=tmp_path, **{**WHERE, **where})
    msg = str(err.value)
    for w in words:
        assert w in msg, (w, msg)
    assert str(tmp_path) in msg  # where it looked


def test_require_rows_keeps_the_asked_rows(tmp_path):
    rows = analysis.require_rows(_fixture_rows(tmp_path), data_dir=tmp_path, batch="single",
                            require={"contexts": ("ctx", [4096, 32000])}, **WHERE)
    assert sorted(set(rows["ctx"])) == [4096, 32000]
    # Measured here (no source files): said so.
    with pytest.raises(ValueError, match="the rows measured here"):
        analysis.require_rows(pd.read_csv(FIXTURE), data_dir=tmp_path, batch="single",
                         require={"contexts": ("ctx", [5])}, **WHERE)


def test_no_data_names_data_dir(tmp_path):
    with pytest.raises(ValueError, match=r"^data_dir: expected a run's roofline\*\.csv under"):
        analysis.require_rows(analysis.load_measurements(tmp_path, ["roofline"]),
                         data_dir=tmp_path, names=["roofline"], batch="single", **WHERE)
    # The committed data, as the notebooks name it: from the repository root.
    with pytest.raises(ValueError, match=r"in data/h200/2026-\S+ for shape='kimi-k3-tp8'"):
        analysis.require_rows(analysis.load_measurements(ROOT / "data" / "h200", ["roofline"]),
                         data_dir=ROOT / "data" / "h200", batch="single",
                         require={"contexts": ("ctx", [1024])}, **WHERE)


@pytest.mark.slow
def test_papermill_stops_on_a_context_the_data_lacks(tmp_path):
    # The roofline run holds 4096, 32000, 65536 and 109440: 1024 was dropped silently.
    with pytest.raises(pm.PapermillExecutionError,
                       match=r"contexts: expected contexts present in data/h200/.* got 1024 "
                             r"\(there: 4096, 32000, 65536, 109440\)"):
        pm.execute_notebook(str(ROOT / "notebooks" / "03_roofline.ipynb"),
                            str(tmp_path / "x.ipynb"), kernel_name="python3",
                            parameters={"contexts": [1024, 4096], "out_dir": str(tmp_path)},
                            progress_bar=False)


# ------------------------------------------------------------------ run over run
def test_run_over_run_sets_each_point_beside_the_previous_committed_run():
    data = analysis.load_measurements(ROOT / "data" / "h200", ["formats", "perf_matrix"])
    prev = analysis.previous_run(data, ROOT / "data" / "h200")
    assert prev is not None and set(prev["commit"]) != set(data["commit"])
    assert str(prev["date"].max()) < str(data["date"].min())
    ror = analysis.run_over_run(data, prev)
    assert not ror.empty and ror.attrs["previous"] == str(prev["commit"].iloc[0])
    assert (ror["new_over_previous"] > 0).all()
    assert ror["new_over_previous"].is_monotonic_decreasing  # regressions first
    one = ror.iloc[0]
    pick = data[(data["timing"] == "graph") & (data["variant"] == one["variant"])
                & (data["weight_format"] == one["weight_format"])
                & (data["cache_dtype"] == one["cache_dtype"])]
    assert any(abs(pick["median_us"] - one["new_us"]) < 1e-6)
    assert "64x4096" in set(ror["contexts"])  # batches as the matrix names them


def test_run_over_run_without_an_earlier_run_is_empty(tmp_path):
    data = analysis.load_measurements(ROOT / "data" / "h200", ["formats", "perf_matrix"])
    assert analysis.previous_run(data, tmp_path) is None
    assert analysis.run_over_run(data, None).empty
    fake = data.assign(median_us=data["median_us"] * 2)
    ror = analysis.run_over_run(fake, data)
    assert ror["new_over_previous"].round(9).eq(2.0).all()


@pytest.mark.slow
@pytest.mark.parametrize("deaths", [1, 2])
def test_a_kernel_that_dies_before_answering_is_started_once_more(deaths, tmp_path, monkeypatch):
    calls = []

    def execute(src, dst, **kw):
        calls.append(dst)
        if len(calls) <= deaths:
            raise RuntimeError("Kernel died before replying to kernel_info")
        shutil.copy(src, dst)

    monkeypatch.setattr(pm, "execute_notebook", execute)
    result = report.run_notebook(NOTEBOOKS[0], {}, tmp_path, cell_progress=False)
    assert len(calls) == 2  # never a third start
    assert result.ok == (deaths == 1)
    if deaths == 2:
        assert "Kernel died" in result.error


# ------------------------------------------------------------------ bad data: before any output
def _matrix_dir(tmp_path: Path, change=None, name: str = "perf_matrix_all.csv") -> Path:
    """A data folder holding one committed run's matrix, ``change`` applied to its frame."""
    d = tmp_path / "data"
    d.mkdir(exist_ok=True)
    df = pd.read_csv(_latest_run() / "perf_matrix.csv")
    if change is not None:
        df = change(df)
    df.to_csv(d / name, index=False)
    return d


def _set(col, value, row=3):
    def change(df):
        df[col] = df[col].astype(float)
        df.loc[row, col] = value
        df.loc[row, "error"] = float("nan")  # no error beside it
        return df
    return change


BAD_DATA = {
    "no such folder": (lambda t: t / "absent", ["data_dir", "no such folder"]),
    "an empty folder": (lambda t: (t / "empty").mkdir() or t / "empty",
                        ["data_dir", "perf_matrix*.csv", "got none"]),
    "no median_us": (lambda t: _matrix_dir(t, lambda df: df.drop(columns=["median_us"])),
                     ["perf_matrix_all.csv", "['median_us']"]),
    "a 0-byte CSV": (lambda t: (t / "z").mkdir() or (t / "z" / "perf_matrix.csv").write_text("")
                     or t / "z", ["perf_matrix.csv", "an empty file"]),
    "a NaN time": (lambda t: _matrix_dir(t, _set("median_us", float("nan"))),
                   ["perf_matrix_all.csv", "row 3 (line 5)", "median_us", "nan"]),
    "a negative time": (lambda t: _matrix_dir(t, _set("median_us", -4.0)),
                        ["row 3", "median_us", "-4.0"]),
    "a NaN fraction": (lambda t: _matrix_dir(t, _set("roof_fraction", float("nan"), 7)),
                       ["row 7", "roof_fraction", "nan"]),
    "a negative fraction": (lambda t: _matrix_dir(t, _set("roof_fraction", -0.5, 0)),
                            ["row 0", "roof_fraction", "-0.5"]),
}


@pytest.mark.parametrize("case", list(BAD_DATA))
def test_bad_data_is_refused_before_any_output(case, tmp_path, capsys):
    make, words = BAD_DATA[case]
    data = make(tmp_path)
    out = tmp_path / "out"
    err = _one_line_error(["--notebooks", "04", "-p", f"data_dir={data}", "--out", str(out)],
                          capsys)
    assert "04_formats.ipynb: " in err
    for w in words:
        assert w in err, (w, err)
    assert not out.exists()


def test_a_latest_run_without_times_is_not_replaced_by_an_older_one(tmp_path):
    # The older run complete, the latest without median_us: an error naming the latest,
    # not the older run's figure labelled as the latest.
    data = _matrix_dir(tmp_path, name="perf_matrix_old.csv")
    _matrix_dir(tmp_path, lambda df: df.assign(commit="f" * 12, date="2099-01-01T00:00:00Z")
                .drop(columns=["median_us"]), name="perf_matrix_new.csv")
    with pytest.raises(ValueError, match=r"perf_matrix_new.csv: expected the columns \['median_us'\]"):
        analysis.load_measurements(data, ["formats", "perf_matrix"])


def test_a_nan_time_beside_an_error_is_a_row_not_measured(tmp_path):
    def failed(df):
        df["median_us"] = df["median_us"].astype(float)
        df.loc[2, "median_us"] = float("nan")
        df["error"] = df["error"].astype(object)
        df.loc[2, "error"] = "RuntimeError: out of resources"
        return df
    data = _matrix_dir(tmp_path, failed)
    analysis.check_data_dir(data, ("formats", "perf_matrix"))
    assert analysis.load_measurements(data, ["perf_matrix"])["median_us"].isna().sum() >= 1


def test_the_replot_names_are_the_notebooks_own():
    for name, names in report.REPLOT_DATA.items():
        src = (ROOT / "notebooks" / name).read_text()
        assert f"names={json.dumps(list(names))}".replace('"', '\\"') in src, name
