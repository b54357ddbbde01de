"""Rule pretrain_public: train `pretraining.<name>` on its public dataset, write the checkpoint."""

from dphpo.data.registry import dataset_download
from dphpo.features.pretrain import run_pretraining
from dphpo.privacy.randomness import key_from_config
from dphpo.provenance import config_hash
from dphpo.studies import jobs

sm = snakemake  # noqa: F821 - injected by Snakemake
name = sm.wildcards.name
with jobs.job_log(sm.log[0], threads=sm.threads):
    settings = dict(sm.params.settings)
    public = settings["public_dataset"]
    run_pretraining(
        name,
        settings,
        sm.output.checkpoint,
        summary_path=sm.output.summary,
        data_dir=sm.params.data_dir,
        download=dataset_download(sm.config, public),
        # labelled by the section's hash (the rule's params): another version of it draws other noise
        noise=key_from_config(sm.config).scope(pretraining=name, settings=config_hash(settings)),
    )
