"""The workflow used as a Snakemake `module` with a path prefix inside another project."""

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "tests" / "configs" / "tiny.yaml"


@pytest.mark.slow
def test_pretrained_extractor_reads_its_checkpoint_under_the_module_prefix(tmp_path):
    cfg = yaml.safe_load(TINY.read_text())
    cfg["extractors"]["syn_cnn"] = {"kind": "pretrained_public", "pretrain": "syn_cnn"}
    cfg["studies"] = [{"dataset": "digits", "extractor": "syn_cnn"}]
    cfg["pretraining"] = {"syn_cnn": {"arch": "small_cnn", "public_dataset": "synthetic_shapes", "epochs": 1,
                                      "max_train": 256}}
    cfg["datasets"] = {"digits": {"max_train": 200, "max_test": 100}}
    (tmp_path / "dphpo.yaml").write_text(yaml.safe_dump(cfg))
    (tmp_path / "Snakefile").write_text(f"""
configfile: "dphpo.yaml"


module dphpo:
    snakefile:
        {str(REPO / "Snakefile")!r}
    config:
        config
    prefix:
        "sub"


use rule * from dphpo as dphpo_*
""")
    target = "sub/results/features/digits/syn_cnn.h5"
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--cores", "2", target], cwd=tmp_path,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert (tmp_path / "sub" / "results" / "pretrained" / "syn_cnn.pt").is_file()
    assert (tmp_path / target).is_file()
    assert not (tmp_path / "results").exists()  # nothing outside the prefix
