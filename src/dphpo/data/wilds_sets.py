"""Waterbirds, Camelyon17 and fMoW read from the WILDS on-disk format (Koh et al. 2021), no `wilds` needed.

Each folder is what `wilds.get_dataset(..., download=True)` unpacks under the data folder (or what
`datasets.<name>.path` names):

- waterbirds_v1.0/metadata.csv: img_id, img_filename, y (0 landbird, 1 waterbird), split (0 train,
  1 val, 2 test), place (0 land, 1 water); images at img_filename (e.g. 001.Black_footed_Albatross/…jpg).
  `waterbirds`: train = split 0, test = split 2, resized to 224x224. Table 5: the average test
  accuracy (ID) and the worst accuracy over the four (y, place) groups (OOD).
- camelyon17_v1.0/metadata.csv: patient, node, x_coord, y_coord, tumor (the label), center, split
  (0 train, 1 held-out patches of the training hospitals); patches at
  patches/patient_{patient:03}_node_{node}/patch_patient_{patient:03}_node_{node}_x_{x}_y_{y}.png (96x96).
  As WILDS: center 1 is the OOD validation hospital, center 2 the OOD test hospital.
  `camelyon17`: train = split 0 of centers 0, 3, 4; test = their split 1 (WILDS's id_val: the ID
  number). `camelyon17_ood`: no training split; test = center 2 (WILDS's test: the OOD number).
- fmow_v1.1/rgb_metadata.csv (split train/val/test/seq, category, country_code, timestamp, …) and
  country_code_mapping.csv (alpha-3, region); images at images/rgb_img_{row}.png, row the line of
  rgb_metadata.csv (0-based, `seq` rows included in the numbering, never loaded). WILDS's official
  split (time_after_2016): ID = before 2013, OOD validation = 2013–2015, OOD test = 2016 and later.
  `fmow`: train = split train before 2013, test = split test before 2013 (id_test). `fmow_ood`: no
  training split; test = split test from 2016 (WILDS's test); Table 5 reports its worst-region
  accuracy (regions Africa, Americas, Asia, Europe, Oceania; "Other" left out of the worst case).

Every split is read in metadata order; `*_groups` return the test split's group ids in that same order.
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from dphpo.data.dataset import make_dataset
from dphpo.data.image_files import ImageFiles
from dphpo.data.local_files import files_digest, locate
from dphpo.errors import DatasetError

WATERBIRDS = "waterbirds_v1.0"
CAMELYON = "camelyon17_v1.0"
FMOW = "fmow_v1.1"
#: The license each dataset publishes (the registry's specs read it here).
LICENSES: dict[str, str] = {
    "waterbirds": "CC BY 4.0 (WILDS)",
    "camelyon17": "CC0 1.0", "camelyon17_ood": "CC0 1.0",
    "fmow": "FMoW Challenge Public License", "fmow_ood": "FMoW Challenge Public License",
}
WATERBIRDS_SIZE = (224, 224)  # resized to it (its images come in many sizes)
# the published image sizes (a file of another size is resized to it); the images stay on disk (ImageFiles)
CAMELYON_SIZE = (96, 96)
FMOW_SIZE = (224, 224)
WATERBIRDS_GROUPS = ["landbird on land", "landbird on water", "waterbird on land", "waterbird on water"]
CAMELYON_OOD_CENTER = 2  # WILDS TEST_CENTER (center 1 is its OOD validation hospital)
CAMELYON_HELD_OUT_CENTERS = (1, 2)
FMOW_ID_BEFORE, FMOW_OOD_FROM = 2013, 2016  # time_after_2016: three years before it are the OOD validation
FMOW_REGIONS = ["Africa", "Americas", "Asia", "Europe", "Oceania", "Other"]
FMOW_CATEGORIES = [
    "airport", "airport_hangar", "airport_terminal", "amusement_park", "aquaculture", "archaeological_site", "barn",
    "border_checkpoint", "burial_site", "car_dealership", "construction_site", "crop_field", "dam", "debris_or_rubble",
    "educational_institution", "electric_substation", "factory_or_powerplant", "fire_station", "flooded_road",
    "fountain", "gas_station", "golf_course", "ground_transportation_station", "helipad", "hospital",
    "impoverished_settlement", "interchange", "lake_or_pond", "lighthouse", "military_facility",
    "multi-unit_residential", "nuclear_powerplant", "office_building", "oil_or_gas_facility", "park",
    "parking_lot_or_garage", "place_of_worship", "police_station", "port", "prison", "race_track", "railway_bridge",
    "recreational_facility", "road_bridge", "runway", "shipyard", "shopping_mall", "single-unit_residential",
    "smokestack", "solar_farm", "space_facility", "stadium", "storage_tank", "surface_mine", "swimming_pool",
    "toll_booth", "tower", "tunnel_opening", "waste_disposal", "water_treatment_facility", "wind_farm", "zoo",
]  # WILDS's fixed class order (wilds/datasets/fmow_dataset.py)
WILDS_NAMES = {WATERBIRDS: "waterbirds", CAMELYON: "camelyon17", FMOW: "fmow"}


def _rows(path: Path, columns: tuple[str, ...], key: str) -> list[dict]:
    try:
        with path.open(newline="", encoding="utf-8") as fh:
            rows = list(csv.DictReader(fh))
    except OSError as exc:
        raise DatasetError(f"{key}: cannot read {path} ({exc})") from None
    missing = sorted(set(columns) - set(rows[0] if rows else {}))
    if missing:
        raise DatasetError(f"{key}: {path.name} lacks column(s) {', '.join(missing)} (WILDS format)")
    return rows


def _folder(root: Path, folder: str, marker: str, name: str, download: bool) -> Path:
    return locate(root, folder, marker, name, download=lambda: _download_wilds(WILDS_NAMES[folder], root) if download else None)


def _download_wilds(dataset: str, root: Path) -> None:
    """The optional download route: the `wilds` package unpacks the same folder under `root`."""
    try:
        import wilds
    except ImportError as exc:
        raise DatasetError(f"downloading {dataset} needs the `wilds` package (pip install wilds), or place its "
                           f"WILDS folder under {root}") from exc
    wilds.get_dataset(dataset=dataset, root_dir=str(root), download=True)


def _int(row: dict, col: str, where: str) -> int:
    try:
        return int(float(row[col]))
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: column {col} holds {row[col]!r}, not an integer") from None


# ------------------------------------------------------------------------------------------------
# Waterbirds


def _waterbirds_rows(root: Path, download: bool) -> tuple[Path, list[dict]]:
    folder = _folder(root, WATERBIRDS, "metadata.csv", "waterbirds", download)
    return folder, _rows(folder / "metadata.csv", ("img_filename", "y", "split", "place"), "datasets.waterbirds")


def load_waterbirds(root: Path, download: bool = False):
    folder, rows = _waterbirds_rows(root, download)
    where = f"datasets.waterbirds ({folder / 'metadata.csv'})"
    parts = {s: [r for r in rows if _int(r, "split", where) == code] for s, code in (("train", 0), ("test", 2))}
    x = {s: ImageFiles([folder / r["img_filename"] for r in rs], WATERBIRDS_SIZE, "datasets.waterbirds")
         for s, rs in parts.items()}
    y = {s: np.asarray([_int(r, "y", where) for r in rs], dtype=np.int64) for s, rs in parts.items()}
    return make_dataset("waterbirds", "image", x["train"], y["train"], x["test"], y["test"], num_classes=2,
                        source=f"WILDS {WATERBIRDS} (train split 0, test split 2, resized to 224x224)",
                        license=LICENSES["waterbirds"], classes=["landbird", "waterbird"],
                        checksum=files_digest(folder, ["metadata.csv", *(r["img_filename"] for rs in parts.values() for r in rs)]))


def waterbirds_groups(root: Path) -> tuple[np.ndarray, list[str]]:
    """Group of each test image: 2*y + place (WATERBIRDS_GROUPS)."""
    folder, rows = _waterbirds_rows(root, False)
    where = f"datasets.waterbirds ({folder / 'metadata.csv'})"
    test = [r for r in rows if _int(r, "split", where) == 2]
    return np.asarray([2 * _int(r, "y", where) + _int(r, "place", where) for r in test], dtype=np.int64), WATERBIRDS_GROUPS


# ------------------------------------------------------------------------------------------------
# Camelyon17


def camelyon_patch(row: dict) -> str:
    p, n, x, y = (int(float(row[c])) for c in ("patient", "node", "x_coord", "y_coord"))
    return f"patches/patient_{p:03}_node_{n}/patch_patient_{p:03}_node_{n}_x_{x}_y_{y}.png"


def load_camelyon17(part: str, root: Path, download: bool = False):
    name = "camelyon17" if part == "id" else "camelyon17_ood"
    folder = _folder(root, CAMELYON, "metadata.csv", name, download)
    where = f"datasets.{name} ({folder / 'metadata.csv'})"
    rows = _rows(folder / "metadata.csv", ("patient", "node", "x_coord", "y_coord", "tumor", "center", "split"), where)
    center = [_int(r, "center", where) for r in rows]
    split = [_int(r, "split", where) for r in rows]
    if part == "id":
        picks = {s: [r for r, c, k in zip(rows, center, split) if c not in CAMELYON_HELD_OUT_CENTERS and k == code]
                 for s, code in (("train", 0), ("test", 1))}
        how = "train: split 0 of centers 0, 3, 4; test: their split 1 (WILDS id_val)"
    else:
        picks = {"train": [], "test": [r for r, c in zip(rows, center) if c == CAMELYON_OOD_CENTER]}
        how = f"no training split; test: center {CAMELYON_OOD_CENTER} (WILDS test)"
    x = {s: ImageFiles([folder / camelyon_patch(r) for r in rs], CAMELYON_SIZE, f"datasets.{name}") for s, rs in picks.items()}
    y = {s: np.asarray([_int(r, "tumor", where) for r in rs], dtype=np.int64) for s, rs in picks.items()}
    return make_dataset(name, "image", x["train"], y["train"], x["test"], y["test"], num_classes=2,
                        source=f"WILDS {CAMELYON} ({how})", license=LICENSES[name], classes=["normal", "tumor"],
                        checksum=files_digest(folder, ["metadata.csv", *(camelyon_patch(r) for rs in picks.values() for r in rs)]))


# ------------------------------------------------------------------------------------------------
# fMoW


def _fmow_rows(root: Path, download: bool, name: str) -> tuple[Path, list[tuple[int, dict]], dict[str, str]]:
    folder = _folder(root, FMOW, "rgb_metadata.csv", name, download)
    rows = _rows(folder / "rgb_metadata.csv", ("split", "category", "country_code", "timestamp"), f"datasets.{name}")
    mapping = _rows(folder / "country_code_mapping.csv", ("alpha-3", "region"), f"datasets.{name}")
    regions = {r["alpha-3"]: r["region"] if r["region"] in FMOW_REGIONS else "Other" for r in mapping}
    return folder, list(enumerate(rows)), regions


def _fmow_part(indexed: list[tuple[int, dict]], part: str) -> dict[str, list[tuple[int, dict]]]:
    def year(i: int, r: dict) -> int:
        try:
            return int(r["timestamp"][:4])
        except ValueError:
            raise DatasetError(f"rgb_metadata.csv data row {i + 1}: timestamp {r['timestamp']!r} does not start with a "
                               "year (the WILDS fMoW v1.1 metadata)") from None

    if part == "id":
        return {s: [(i, r) for i, r in indexed if r["split"] == s and year(i, r) < FMOW_ID_BEFORE] for s in ("train", "test")}
    return {"train": [], "test": [(i, r) for i, r in indexed if r["split"] == "test" and year(i, r) >= FMOW_OOD_FROM]}


def load_fmow(part: str, root: Path, download: bool = False):
    name = "fmow" if part == "id" else "fmow_ood"
    folder, indexed, _ = _fmow_rows(root, download, name)
    picks = _fmow_part(indexed, part)
    unknown = sorted({r["category"] for rs in picks.values() for _, r in rs} - set(FMOW_CATEGORIES))
    if unknown:
        raise DatasetError(f"datasets.{name}: rgb_metadata.csv has unknown categories {unknown[:5]}")
    index = {c: i for i, c in enumerate(FMOW_CATEGORIES)}
    x = {s: ImageFiles([folder / "images" / f"rgb_img_{i}.png" for i, _ in rs], FMOW_SIZE, f"datasets.{name}")
         for s, rs in picks.items()}
    y = {s: np.asarray([index[r["category"]] for _, r in rs], dtype=np.int64) for s, rs in picks.items()}
    how = ("ID: train and test splits before 2013" if part == "id"
           else "OOD test: test split from 2016 (WILDS official time_after_2016); no training split")
    files = ["rgb_metadata.csv", "country_code_mapping.csv", *(f"images/rgb_img_{i}.png" for rs in picks.values() for i, _ in rs)]
    return make_dataset(name, "image", x["train"], y["train"], x["test"], y["test"], num_classes=len(FMOW_CATEGORIES),
                        source=f"WILDS {FMOW} ({how})", license=LICENSES[name], classes=list(FMOW_CATEGORIES),
                        checksum=files_digest(folder, files))


def fmow_groups(part: str, root: Path) -> tuple[np.ndarray, list[str]]:
    """Region of each test image (FMOW_REGIONS; a country without a region is "Other", as in WILDS)."""
    name = "fmow" if part == "id" else "fmow_ood"
    _, indexed, regions = _fmow_rows(root, False, name)
    test = _fmow_part(indexed, part)["test"]
    ids = [FMOW_REGIONS.index(regions.get(r["country_code"], "Other")) for _, r in test]
    return np.asarray(ids, dtype=np.int64), FMOW_REGIONS

