"""The source forms `model.path`, `data.train` and `data.validation` accept besides a local path
(the CRD's CEL rules accept exactly these; common/finetunejob_schema.json):

  hf://ORG/NAME[@REVISION]                        a model repository on the Hugging Face Hub
  hf://datasets/ORG/NAME/PATH/FILE.jsonl[@REV]   one file of a dataset repository
  hf://datasets/ORG/NAME[@REV]?split=SPLIT[&subset=SUBSET]
                                                  one split of a dataset: the files it is made
                                                  of, as load_dataset(ORG/NAME, SUBSET, split=)
  s3://BUCKET/PREFIX                              an object, or every object under a prefix

The patterns are common/source_forms.h's, from which the CRD's CEL rules are written;
tests/fetch checks that both accept and refuse the same sources.
"""
import re
from dataclasses import dataclass
from typing import Optional

from .errors import FetchError

# The Hub's own rules for names: letters, digits, '-', '_', '.'; at most 96 characters.
_NAME = r"[A-Za-z0-9][A-Za-z0-9._-]{0,95}"
_REVISION = r"[A-Za-z0-9][A-Za-z0-9._/-]{0,199}"
HF_MODEL = re.compile(rf"^hf://(?P<org>{_NAME})/(?P<name>{_NAME})(@(?P<revision>{_REVISION}))?$")
_PATH = r"[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)*"
HF_DATASET_FILE = re.compile(
    rf"^hf://datasets/(?P<org>{_NAME})/(?P<name>{_NAME})/(?P<path>{_PATH})(@(?P<revision>{_REVISION}))?$")
_SPLIT_NAME = r"[A-Za-z0-9._-]{1,100}"
HF_DATASET_SPLIT = re.compile(
    rf"^hf://datasets/(?P<org>{_NAME})/(?P<name>{_NAME})(@(?P<revision>{_REVISION}))?"
    rf"[?]split=(?P<split>{_SPLIT_NAME})(&subset=(?P<subset>{_SPLIT_NAME}))?$")
# S3 bucket names: 3-63 lower-case letters, digits, '.', '-'.
S3 = re.compile(r"^s3://(?P<bucket>[a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(/(?P<prefix>[^\n]*))?$")


@dataclass(frozen=True)
class HubSource:
    text: str
    repo_type: str  # "model" or "dataset"
    repo_id: str  # ORG/NAME
    revision: str  # as asked: a branch, tag or commit
    path: Optional[str] = None  # a dataset's one file
    split: Optional[str] = None  # or one split of a dataset (and its subset, datasets' config)
    subset: Optional[str] = None


@dataclass(frozen=True)
class S3Source:
    text: str
    bucket: str
    prefix: str


def parse_source(text: str):
    """HubSource or S3Source; FetchError naming what is wrong with a malformed one."""
    if text.startswith("hf://datasets/") and "?" in text:
        m = HF_DATASET_SPLIT.fullmatch(text)
        if not m or ".." in text:
            raise FetchError(text, "expected hf://datasets/ORG/NAME[@REVISION]?split=SPLIT"
                                   "[&subset=SUBSET]")
        return HubSource(text, "dataset", f"{m['org']}/{m['name']}", m["revision"] or "main",
                         split=m["split"], subset=m["subset"])
    if text.startswith("hf://datasets/"):
        m = HF_DATASET_FILE.fullmatch(text)
        if not m or ".." in text:
            raise FetchError(text, "expected hf://datasets/ORG/NAME/PATH/FILE[@REVISION]")
        return HubSource(text, "dataset", f"{m['org']}/{m['name']}", m["revision"] or "main",
                         m["path"])
    if text.startswith("hf://"):
        m = HF_MODEL.fullmatch(text)
        if not m:
            raise FetchError(text, "expected hf://ORG/NAME[@REVISION] (a model repository)")
        return HubSource(text, "model", f"{m['org']}/{m['name']}", m["revision"] or "main")
    if text.startswith("s3://"):
        m = S3.fullmatch(text)
        if not m or ".." in text:
            raise FetchError(text, "expected s3://BUCKET/PREFIX (a bucket name of 3-63 lower-case "
                                   "letters, digits, '.' and '-'; no '..')")
        return S3Source(text, m["bucket"], m["prefix"] or "")
    raise FetchError(text, "not a source this tool fetches (hf:// or s3://)")

