"""`dphpo init` (issue 30): from the user's files to a study in two commands, for each kind of data."""

import csv
import json
import shlex
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image
from sklearn.datasets import load_digits

from dphpo.cli import main as dphpo
from dphpo.data.files import FileDataset

from test_workflow import REPO, snakemake

# What the test shrinks, as a second config file (the user's first command is init's, unchanged).
SMALL = {
    "seeds": [0],
    "privacy": {"target_eps": [2]},
    "search_space": {"eta": {"min": 0.05, "max": 1.0, "num": 3}, "steps": [5, 10]},
    "extractors": {"efficientnet_lite0": {"resolution": 32}},
}


@pytest.fixture(scope="module")
def user_files(tmp_path_factory):
    """An image folder (digits as PNGs), a CSV of short texts and a features .npz, as a user has them."""
    root = tmp_path_factory.mktemp("user")
    d = load_digits()
    for i, (image, label) in enumerate(zip(d.images[:300], d.target[:300])):
        folder = root / "digit_pngs" / "train" / f"d{label}"
        folder.mkdir(parents=True, exist_ok=True)
        Image.fromarray((image * 15).astype(np.uint8)).save(folder / f"{i}.png")
    np.savez(root / "feats.npz", train_x=d.data[:600] / 16, train_y=d.target[:600], test_x=d.data[600:800] / 16,
             test_y=d.target[600:800])
    with open(root / "reviews.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["comment", "sentiment"])
        for i in range(240):
            writer.writerow([("a good, great film " if i % 2 else "a bad, dull film ") + str(i), "pos" if i % 2 else "neg"])
    return root


def test_init_writes_a_valid_commented_config_and_names_what_it_counted(user_files, tmp_path, capsys):
    out = tmp_path / "mine.yaml"
    images = ["init", "--images", str(user_files / "digit_pngs"), "--out", str(out)]
    # the size is the user's to declare, and a test split carved out of the private records theirs to declare public
    assert dphpo(images + ["--public-test"]) == 2
    assert "pass --public-n-train 232 if you publish that count anyway" in capsys.readouterr().err
    assert dphpo(images + ["--public-n-train", "232"]) == 2
    assert "--public-test: digit_pngs has no test split of its own" in capsys.readouterr().err
    assert not out.exists()
    assert dphpo(images + ["--public-n-train", "232", "--public-test"]) == 0
    printed = capsys.readouterr().out
    assert f"snakemake --cores all --configfile {out} --replace-workflow-config" in printed
    # 232 training images: the planner says the stages cannot rank r, and what the recommended rule does instead
    assert "the stage trials cannot rank r" in printed and "selection noise" in printed and "public prior" in printed
    text = out.read_text()
    assert "DECLARED with --public-n-train (digit_pngs: 232)" in text and "test_split: public" in text
    assert "classes were READ from your files (digit_pngs: 10 classes)" in text
    config = yaml.safe_load(text)
    (name,) = config["datasets"]
    section = config["datasets"][name]
    assert name == "digit_pngs" and section["kind"] == "image_folder" and section["public_n_train"] == 232
    assert section["classes"] == [f"d{c}" for c in range(10)]  # the label set, declared
    assert config["studies"] == [{"dataset": "digit_pngs", "extractor": "efficientnet_lite0"}]
    assert config["selection"]["noise_std"] == "auto"  # planned from the public size, not MNIST's 300 counts
    assert config["variants"]["safeguarded"]["linear_scaling"]["safeguard"] is True  # the recommended rule runs
    assert config["privacy"]["delta"] < 1 / section["public_n_train"]
    # its tables in their own folder, named after the config, with a comment saying why
    assert config["namespace"] == "mine"
    assert "# namespace: this study's tables and figures go to results/tables/mine/" in text
    assert text.index("# namespace:") < text.index("\nnamespace: mine\n")
    assert dphpo(["check-config", str(out)]) == 0
    assert dphpo(["init", "--images", str(user_files / "digit_pngs"), "--out", str(out)]) == 2  # never overwrites
    assert "exists: pass --add" in capsys.readouterr().err


def test_init_refuses_what_the_workflow_would_refuse_naming_the_layout(user_files, tmp_path, capsys):
    flat = user_files / "digit_pngs" / "train"  # class folders directly under the folder given
    assert dphpo(["init", "--images", str(flat), "--out", str(tmp_path / "a.yaml")]) == 2
    assert "has class folders (d0, d1, d2, d3, d4, ...) directly under it: move them into train/" in capsys.readouterr().err
    assert dphpo(["init", "--texts", str(user_files / "reviews.csv"), "--out", str(tmp_path / "b.yaml")]) == 2
    assert "which column holds the text? Name it with --text-field (columns: comment, sentiment)" in capsys.readouterr().err
    assert not (tmp_path / "a.yaml").exists() and not (tmp_path / "b.yaml").exists()


def test_init_declares_a_public_shape_for_every_image_folder_without_reading_a_pixel(user_files, tmp_path, capsys):
    """The workflow refuses to pick a common shape from private images; init always writes public ones (the
    extractor's input resolution, rgb): written only where the images mixed sizes, one image of another
    size would resize every record. The study then loads."""
    folder = tmp_path / "pngs"
    shutil.copytree(user_files / "digit_pngs", folder)
    flags = ["--public-n-train", "232", "--public-test"]
    assert dphpo(["init", "--images", str(folder), "--out", str(tmp_path / "same.yaml"), *flags]) == 0
    same = yaml.safe_load((tmp_path / "same.yaml").read_text())["datasets"]["pngs"]
    Image.new("RGB", (20, 24), (9, 99, 199)).save(next((folder / "train").iterdir()) / "colour.png")
    out = tmp_path / "mixed.yaml"
    assert dphpo(["init", "--images", str(folder), "--out", str(out), *flags]) == 0
    assert "RGB, resized to 64x64" in capsys.readouterr().out
    section = yaml.safe_load(out.read_text())["datasets"]["pngs"]
    assert section["image_size"] == same["image_size"] == [64, 64] and section["image_mode"] == same["image_mode"] == "rgb"
    assert dphpo(["check-config", str(out)]) == 0


def readme_commands() -> list[str]:
    """The two commands of README.md's "Your own data" section."""
    section = (REPO / "README.md").read_text().split("## Your own data", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line.split("  #")[0].strip() for line in block.strip().splitlines()]


def test_the_readme_commands_run_a_study_of_each_kind(user_files, tmp_path, monkeypatch, capsys):
    """README.md's two commands (the image folder at their placeholder path), then the other kinds added."""
    init, run = readme_commands()
    pets = tmp_path / "path" / "to" / "pets"
    shutil.copytree(user_files / "digit_pngs", pets)
    for image in sorted((pets / "train").glob("*/*.png"))[::5]:  # a test split of its own, as the README's layout
        (pets / "test" / image.parent.name).mkdir(parents=True, exist_ok=True)
        image.rename(pets / "test" / image.parent.name / image.name)
    monkeypatch.chdir(tmp_path)
    assert dphpo(shlex.split(init)[1:]) == 0
    assert run.replace(".venv/bin/", "") in capsys.readouterr().out  # the command init prints is the README's
    out = Path("config") / "pets.yaml"
    assert dphpo(["init", "--texts", str(user_files / "reviews.csv"), "--text-field", "comment", "--out", str(out), "--add",
                  "--public-n-train", "190", "--public-test"]) == 0
    assert dphpo(["init", "--features", str(user_files / "feats.npz"), "--out", str(out), "--add", "--public-n-train", "600"]) == 0
    assert yaml.safe_load(out.read_text())["namespace"] == "pets"  # --add keeps the config's namespace
    small = tmp_path / "small.yaml"  # the test's only change: fewer seeds, budgets and grid points
    small.write_text(yaml.safe_dump(SMALL))
    args = shlex.split(run)[1:]
    args[args.index(str(out)) + 1:args.index(str(out)) + 1] = [str(small)]
    snakemake(*args, cwd=tmp_path)
    runs = tmp_path / "results" / "runs"
    for dataset, extractor in (("pets", "efficientnet_lite0"), ("reviews", "minilm_l6"), ("feats", "given")):
        for method, variant in (("linear_scaling", "default"), ("linear_scaling", "safeguarded"), ("random_search", "default")):
            (path,) = (runs / dataset / extractor / method / variant).glob("seed0/eps*/result.json")
            record = json.loads(path.read_text())
            assert record["within_budget"] and record["total_eps"] <= 2.0, (dataset, method, variant)
            assert record["test_accuracy"] > 0.2, (dataset, method, variant)  # chance: 0.1, 0.5, 0.1
    table = (tmp_path / "results" / "tables" / "pets" / "linear_scaling.md").read_text()  # its namespace
    assert not (tmp_path / "results" / "tables" / "linear_scaling.md").exists()
    for dataset in ("pets", "reviews", "feats"):
        assert dataset in table


def test_the_namespace_is_the_config_name_and_add_keeps_what_the_config_has():
    from dphpo.init_study import EMBEDDED, Inspection, add_dataset, new_config, render, study_namespace

    assert study_namespace(Path("config/pets.yaml"), "pets") == "pets"
    assert study_namespace(Path("studies/my pets v2.yaml"), "pets") == "my_pets_v2"
    assert study_namespace(Path("pareto.yaml"), "d") == "pareto_study"  # a folder of the paper's figures
    embedded = yaml.safe_load(EMBEDDED.read_text())
    found = Inspection("feats", "features", 600, 200, [str(c) for c in range(10)], "feats.npz")
    section = {"kind": "features", "path": "/data/feats.npz", "public_n_train": 600}
    config = new_config(found, section, embedded, "mine")
    assert config["namespace"] == "mine"
    other = Inspection("more", "features", 600, 200, [str(c) for c in range(10)], "more.npz")
    more = dict(section, path="/data/more.npz")
    assert add_dataset(config, other, more, embedded, 1e-5)[0]["namespace"] == "mine"
    config.pop("namespace")  # a config written before namespaces keeps its tables' paths
    assert "namespace" not in add_dataset(config, other, more, embedded, 1e-5)[0]
    assert "# namespace:" not in render(config | {"datasets": {"feats": {"public_n_train": 600, "kind": "features"}}}, "cmd")


def test_init_says_where_many_classes_leave_the_first_stage_without_signal(tmp_path, capsys):
    """10,000 records are enough for the selection noise to rank trials, but a head of 256 x 100 weights
    leaves stage 1 at eps = 1 (a tenth of it) below `Safeguard.stage_snr`: init names that target, and only it."""
    from dphpo.hpo.linear_scaling_plan import STAGE_SNR, first_stage_snr
    from dphpo.init_study import default_delta

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "wide.npz", train_x=rng.normal(size=(10_000, 256)).astype(np.float32), train_y=np.arange(10_000) % 100,
             test_x=rng.normal(size=(500, 256)).astype(np.float32), test_y=np.arange(500) % 100)
    assert dphpo(["init", "--features", str(tmp_path / "wide.npz"), "--out", str(tmp_path / "wide.yaml"), "--public-n-train", "10000"]) == 0
    printed = capsys.readouterr().out
    n = yaml.safe_load((tmp_path / "wide.yaml").read_text())["datasets"]["wide"]["public_n_train"]
    snr = {eps: first_stage_snr(0.1 * eps, default_delta(n), n, 256 * 100) for eps in (1, 2)}
    assert snr[1] < STAGE_SNR <= snr[2]
    assert "at target eps 1 the stage trials cannot rank r" in printed
    assert f"stage 1 at eps=0.1 has mu_1*N/sqrt(P) = {snr[1]:.3g}" in printed


def test_init_reads_star_ratings_as_five_classes_by_value(tmp_path, capsys):
    """Integer labels 1..5 in a `stars` column: init finds the column and declares five classes by value
    (not six with an empty 0, which the loader would refuse), and the study reads them in that order."""
    with open(tmp_path / "ratings.csv", "w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(["text", "stars"])
        writer.writerows([f"review {i}", 1 + i % 5] for i in range(200))
    out = tmp_path / "ratings.yaml"
    assert dphpo(["init", "--texts", str(tmp_path / "ratings.csv"), "--out", str(out), "--public-n-train", "160", "--public-test"]) == 0
    assert "5 classes (1, 2, 3, 4, 5)" in capsys.readouterr().out
    section = yaml.safe_load(out.read_text())["datasets"]["ratings"]
    assert section["label_field"] == "stars" and section["classes"] == ["1", "2", "3", "4", "5"]
    assert dphpo(["check-config", str(out)]) == 0
    ds = FileDataset.from_config("ratings", section).load()
    stars = [1 + int(t.split()[1]) % 5 for t in ds.train_inputs]
    assert ds.train_labels.tolist() == [s - 1 for s in stars]  # by value: 1 is the first class


@pytest.mark.parametrize("n_train", [20_000, 150_000])
def test_init_sizes_the_trial_caps_for_the_smaller_delta_of_more_records(tmp_path, capsys, n_train):
    """Above 10,000 records init picks delta below 1e-5, where a cap of 60 Papernot–Steinke trials would
    cost more than 1 % of delta at eps = 8 (the plan refused: init wrote no config for any N > 10,000).
    The copied cap is `auto` (sized for any delta and bundle: P[K > cap] <= 1e-250), and the config passes
    check-config."""
    import dataclasses

    from dphpo.errors import InfeasibleBudgetError
    from dphpo.hpo.papernot_steinke import PSConfig, fitting_max_trials, truncation_delta

    rng = np.random.default_rng(0)
    np.savez(tmp_path / "big.npz", train_x=rng.normal(size=(n_train, 4)).astype(np.float32), train_y=np.arange(n_train) % 2,
             test_x=rng.normal(size=(100, 4)).astype(np.float32), test_y=np.arange(100) % 2)
    out = tmp_path / "big.yaml"
    assert dphpo(["init", "--features", str(tmp_path / "big.npz"), "--out", str(out), "--public-n-train", str(n_train)]) == 0
    config = yaml.safe_load(out.read_text())
    delta = config["privacy"]["delta"]
    assert delta == (1e-6 if n_train < 100_000 else 1e-7)
    for method in ("papernot_steinke", "koskela"):
        psc = PSConfig.from_section(config["baselines"][method], "grid", method)
        truncation_delta(psc, 8.0, delta, method)  # fits
        smallest = fitting_max_trials(dataclasses.replace(psc, max_trials=1), 8.0, delta)
        assert config["baselines"][method]["max_trials"] == "auto" and psc.max_trials == psc.k_dist.auto_cap() > smallest > 60
        tighter = dataclasses.replace(psc, max_trials=smallest - 1)
        with pytest.raises(InfeasibleBudgetError):  # `smallest` is the smallest that fits
            truncation_delta(tighter, 8.0, delta, method)
    assert dphpo(["check-config", str(out)]) == 0


def test_check_config_reads_the_users_files_whole_before_any_job(tmp_path, capsys):
    """The config stage checks paths and columns; `dphpo check-config` also reads the files as the feature
    job will, so a label the declared classes lack (a row added after init) is refused there, not hours later."""
    table = tmp_path / "notes.csv"
    rows = [["text", "label"]] + [[f"note {i}", "ab"[i % 2]] for i in range(100)]
    table.write_text("".join(",".join(r) + "\n" for r in rows))
    out = tmp_path / "notes.yaml"
    assert dphpo(["init", "--texts", str(table), "--out", str(out), "--public-n-train", "80", "--public-test"]) == 0
    assert dphpo(["check-config", str(out)]) == 0
    assert "datasets.notes: text table notes.csv" in capsys.readouterr().out
    with open(table, "a") as fh:
        fh.write("note 100,zz\n")
    assert dphpo(["check-config", str(out)]) == 2
    captured = capsys.readouterr()
    assert "zz" in captured.err and "valid" not in captured.out  # never "valid" for a config whose first job fails


def test_init_keeps_a_tables_own_split_chosen_by_its_header_alone(tmp_path, capsys):
    """A column named `split` is the split, whatever its rows hold (a stray value must not switch the whole
    table to a per-record split): train/test in any case load; a validation value is refused naming the
    column; --split-field names a column of another name."""
    rows = [f"review {i},{'ab'[i % 2]},{'Train' if i % 4 else 'Test'}\n" for i in range(120)]
    (tmp_path / "given.csv").write_text("text,label,split\n" + "".join(rows))
    n = ["--public-n-train", "90"]
    assert dphpo(["init", "--texts", str(tmp_path / "given.csv"), "--out", str(tmp_path / "given.yaml"), *n]) == 0
    assert "split by column 'split'); 90 train / 30 test records" in capsys.readouterr().out
    text = (tmp_path / "given.yaml").read_text()
    assert yaml.safe_load(text)["datasets"]["given"]["split_field"] == "split"
    assert "split_field: your table's own train/test split (given: column 'split')" in text  # the header says so

    (tmp_path / "dev.csv").write_text("text,label,split\n" + "".join(r.replace("Test", "validation") for r in rows))
    assert dphpo(["init", "--texts", str(tmp_path / "dev.csv"), "--out", str(tmp_path / "dev.yaml"), *n, "--public-test"]) == 2
    assert "has split value(s) ['validation'] in column 'split'" in capsys.readouterr().err
    assert not (tmp_path / "dev.yaml").exists()

    (tmp_path / "part.csv").write_text("text,label,part\n" + "".join(rows))
    assert dphpo(["init", "--texts", str(tmp_path / "part.csv"), "--split-field", "part", "--out", str(tmp_path / "p.yaml"), *n]) == 0
    assert "90 train / 30 test" in capsys.readouterr().out
    assert dphpo(["init", "--features", str(tmp_path / "x.npz"), "--split-field", "part"]) == 2
    assert "--split-field: only a text table" in capsys.readouterr().err


def test_init_names_a_dataset_in_ascii_and_says_why_a_name_is_refused(tmp_path, capsys):
    (tmp_path / "données été.csv").write_text("text,label\n" + "".join(f"t {i},{'ab'[i % 2]}\n" for i in range(60)))
    out = tmp_path / "fr.yaml"
    assert dphpo(["init", "--texts", str(tmp_path / "données été.csv"), "--out", str(out), "--public-n-train", "48", "--public-test"]) == 0
    assert list(yaml.safe_load(out.read_text())["datasets"]) == ["donnees_ete"]
    assert dphpo(["init", "--texts", str(tmp_path / "données été.csv"), "--name", "données", "--out", str(tmp_path / "x.yaml")]) == 2
    assert "--name: 'données' must be ASCII letters, digits and _" in capsys.readouterr().err


def test_add_refuses_a_file_the_config_already_studies_under_another_name(tmp_path, capsys):
    """Stop 57's audit: `init --add` of the same file under a second name ran the same study twice on the same
    records; it is refused, naming the dataset that already reads it, and the config is left as it was."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "f.npz", train_x=rng.normal(size=(600, 4)).astype(np.float32), train_y=np.arange(600) % 2,
             test_x=rng.normal(size=(50, 4)).astype(np.float32), test_y=np.arange(50) % 2)
    out = tmp_path / "s.yaml"
    assert dphpo(["init", "--features", str(tmp_path / "f.npz"), "--out", str(out), "--public-n-train", "600"]) == 0
    before = out.read_text()
    capsys.readouterr()
    assert dphpo(["init", "--features", str(tmp_path / "f.npz"), "--name", "again", "--out", str(out), "--add",
                  "--public-n-train", "600"]) == 2
    assert "datasets.f: the config already studies" in capsys.readouterr().err and out.read_text() == before


def test_add_lowers_a_delta_the_new_data_makes_meaningless_and_names_one_it_keeps(tmp_path, capsys):
    """delta = 1e-5 suits 600 records; a dataset of 150,000 added to the config makes it at least 1/N,
    which the workflow refuses: --add lowers it (and raises a user's explicit trial cap for it; `auto` is
    sized for any delta), saying so; 20,000 records leave it valid, and the note says what a new config
    would pick."""
    rng = np.random.default_rng(0)

    def npz(name, n):
        np.savez(tmp_path / name, train_x=rng.normal(size=(n, 4)).astype(np.float32), train_y=np.arange(n) % 2,
                 test_x=rng.normal(size=(50, 4)).astype(np.float32), test_y=np.arange(50) % 2)
        return str(tmp_path / name)

    out = tmp_path / "s.yaml"
    assert dphpo(["init", "--features", npz("small.npz", 600), "--out", str(out), "--public-n-train", "600"]) == 0
    assert dphpo(["init", "--features", npz("mid.npz", 20_000), "--out", str(out), "--add", "--public-n-train", "20000"]) == 0
    assert "privacy.delta 1e-05 is kept for every study; for 20,000 training records dphpo init picks 1e-06" in capsys.readouterr().out
    config = yaml.safe_load(out.read_text())
    assert config["privacy"]["delta"] == 1e-5 and config["baselines"]["koskela"]["max_trials"] == "auto"
    config["baselines"]["papernot_steinke"]["max_trials"] = 60  # a user's explicit cap, sized for delta = 1e-5
    out.write_text(yaml.safe_dump(config))
    assert dphpo(["init", "--features", npz("big.npz", 150_000), "--out", str(out), "--add", "--public-n-train", "150000"]) == 0
    assert "privacy.delta lowered from 1e-05 to 1e-07 for every study" in capsys.readouterr().out
    config = yaml.safe_load(out.read_text())
    assert config["privacy"]["delta"] == 1e-7 and config["baselines"]["papernot_steinke"]["max_trials"] > 60
    assert config["baselines"]["koskela"]["max_trials"] == "auto"
    assert dphpo(["check-config", str(out)]) == 0


def test_add_to_a_config_without_the_safeguarded_rule_does_not_claim_it_runs(tmp_path, capsys):
    """Audit: --add into a config with no safeguarded variant wrote a header (and printed a note) saying the
    recommended rule (variants.safeguarded) runs and skips its stages at small N, where nothing runs it."""
    out = tmp_path / "tiny.yaml"
    shutil.copyfile(REPO / "tests" / "configs" / "tiny.yaml", out)
    assert not yaml.safe_load(out.read_text()).get("variants")
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "f.npz", train_x=rng.normal(size=(300, 4)).astype(np.float32), train_y=np.arange(300) % 2,
             test_x=rng.normal(size=(50, 4)).astype(np.float32), test_y=np.arange(50) % 2)
    assert dphpo(["init", "--features", str(tmp_path / "f.npz"), "--out", str(out), "--add", "--public-n-train", "300"]) == 0
    printed, text = capsys.readouterr().out, out.read_text()
    assert "variants.safeguarded" not in printed and "no variant of this config runs it" in printed
    assert "So the recommended safeguarded rule does not run".lower() in text.lower() and "both run" not in text


def test_add_refuses_a_config_the_workflow_would_not_run_and_keeps_a_link(tmp_path, capsys):
    """Audit: --add extended an empty file, a list or a config without privacy with a traceback, and wrote
    over a symlinked config (the link became a file); a registry dataset's name shared its result paths."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "f.npz", train_x=rng.normal(size=(60, 4)).astype(np.float32), train_y=np.arange(60) % 2,
             test_x=rng.normal(size=(20, 4)).astype(np.float32), test_y=np.arange(20) % 2)
    args = ["init", "--features", str(tmp_path / "f.npz"), "--public-n-train", "60"]
    for name, text, why in (("empty.yaml", "", "holds no config"), ("list.yaml", "- 1\n", "holds no config"),
                            ("bad.yaml", "studies: []\n", "is not a valid config")):
        (tmp_path / name).write_text(text)
        assert dphpo([*args, "--name", "other", "--out", str(tmp_path / name), "--add"]) == 2
        assert f"--add: {tmp_path / name} {why}" in capsys.readouterr().err and (tmp_path / name).read_text() == text
    real = tmp_path / "real.yaml"
    assert dphpo([*args, "--out", str(real)]) == 0
    del_delta = yaml.safe_load(real.read_text())
    del del_delta["privacy"]["delta"]  # the schema's default
    real.write_text(yaml.safe_dump(del_delta))
    (tmp_path / "link.yaml").symlink_to(real)
    (tmp_path / "g.npz").write_bytes((tmp_path / "f.npz").read_bytes())  # another file (the same one is refused)
    second = ["init", "--features", str(tmp_path / "g.npz"), "--public-n-train", "60"]
    assert dphpo([*second, "--name", "second", "--out", str(tmp_path / "link.yaml"), "--add"]) == 0
    assert (tmp_path / "link.yaml").is_symlink() and "second" in yaml.safe_load(real.read_text())["datasets"]
    assert dphpo([*args, "--name", "mnist", "--out", str(tmp_path / "m.yaml")]) == 2
    assert "--name: 'mnist' is a dataset of dphpo's registry" in capsys.readouterr().err
    (tmp_path / "tweets.npz").write_bytes((tmp_path / "f.npz").read_bytes())  # a derived name: made distinct
    assert dphpo(["init", "--features", str(tmp_path / "tweets.npz"), "--public-n-train", "60", "--out", str(tmp_path / "t.yaml")]) == 0
    assert list(yaml.safe_load((tmp_path / "t.yaml").read_text())["datasets"]) == ["tweets_own"]
    assert dphpo(["init", "--images", str(tmp_path / "f.npz"), "--public-n-train", "60", "--out", str(tmp_path / "i.yaml")]) == 2
    assert "is a file; an image folder is a folder" in capsys.readouterr().err
    assert dphpo([*args, "--out", str(tmp_path / "f.npz" / "x.yaml")]) == 2  # before any data are read: named
    assert "--out" in capsys.readouterr().err


def test_init_refuses_a_name_another_config_gives_other_data(tmp_path, capsys):
    """Two files with one stem (a/train.npz, b/train.npz) each got the dataset name `train` in their own
    config: both studies wrote results/runs/train/ and each run overwrote the other's results. Init now
    refuses the second name, naming the config that holds it; the same data again, or another name, pass."""
    rng = np.random.default_rng(0)
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        np.savez(tmp_path / folder / "train.npz", train_x=rng.normal(size=(60, 4)).astype(np.float32),
                 train_y=np.arange(60) % 2, test_x=rng.normal(size=(20, 4)).astype(np.float32), test_y=np.arange(20) % 2)
    configs = tmp_path / "config"
    configs.mkdir()

    def init(folder, out, *extra):
        return dphpo(["init", "--features", str(tmp_path / folder / "train.npz"), "--out", str(configs / out),
                      "--public-n-train", "60", *extra])

    assert init("a", "first.yaml") == 0
    assert init("b", "second.yaml") == 2
    err = capsys.readouterr().err
    assert f"{configs / 'first.yaml'} already has a dataset 'train'" in err and "--name b_train" in err
    assert not (configs / "second.yaml").exists()
    assert init("a", "again.yaml") == 0  # the same data under the same name share their results rightly
    assert init("b", "second.yaml", "--name", "b_train") == 0
    assert list(yaml.safe_load((configs / "second.yaml").read_text())["datasets"]) == ["b_train"]
