"""The dataset package: the only code that writes dataset files. Tables are published atomically as
immutable versions (``outputs/<dataset>/vNNNN`` + ``latest``) and read back as typed tables.

The public names are re-exported here (``from pipeline.dataset import load``); the parts live in
``store`` (files, errors), ``publishing``, ``versioning``, ``reading``, ``files`` (exports, evals, report),
``assemble_contexts``, ``budget``, ``validate``, ``card`` and the exporters.
"""

from pipeline.dataset.files import (
    check_output_name,
    eval_folder,
    export_folder,
    write_csv,
    write_eval,
    write_json_list,
    write_jsonl,
    write_report,
)
from pipeline.dataset.publishing import (
    check_writable,
    code_version,
    publish,
    publish_staged,
    read_staged,
    stage_tables,
    validate_staged,
    validate_written,
)
from pipeline.dataset.reading import Dataset, load, materialize_context, read_manifest, resolve, verify
from pipeline.dataset.store import (
    LATEST,
    VERSION,
    DamagedDataset,
    DatasetNotFound,
    ExportError,
    PublishError,
    check_out_folder,
    check_tables_folder,
    make_staging,
    read_table,
    replace_dir,
    write_table,
    write_tables,
)
from pipeline.dataset.versioning import prune, versions

__all__ = [
    "LATEST", "VERSION", "DamagedDataset", "Dataset", "DatasetNotFound", "ExportError", "PublishError",
    "check_out_folder", "check_output_name", "check_tables_folder", "check_writable", "eval_folder", "code_version", "export_folder", "load", "make_staging", "materialize_context", "prune",
    "publish", "publish_staged", "read_manifest", "read_staged", "read_table", "replace_dir", "resolve",
    "stage_tables", "validate_staged", "validate_written", "verify", "versions", "write_csv", "write_eval",
    "write_json_list", "write_jsonl", "write_report", "write_table", "write_tables",
]
