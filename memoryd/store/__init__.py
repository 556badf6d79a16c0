"""All SurrealDB access: the only package that speaks SurrealQL (schema files aside).

One module per concern, all on the shared connection of :class:`~memoryd.store.base.StoreBase`;
:class:`Store` is their union, so callers hold one object.
"""

from __future__ import annotations

from memoryd.store.actions import ActionQueries
from memoryd.store.anchors import AnchorQueries
from memoryd.store.base import QueryFailed, Ref, StoreBase, key_of, now, plain
from memoryd.store.blobs import BlobQueries
from memoryd.store.code import CodeQueries
from memoryd.store.codegraph import CodeGraphQueries
from memoryd.store.compact import CompactQueries
from memoryd.store.forget import ForgetQueries
from memoryd.store.maintenance import MaintenanceQueries
from memoryd.store.notes import NoteQueries
from memoryd.store.privacy import PrivacyQueries
from memoryd.store.progress import ProgressQueries
from memoryd.store.recall import RecallQueries
from memoryd.store.rederive import RederiveQueries
from memoryd.store.rewrite import RewriteQueries
from memoryd.store.schema import SCHEMA_DIR, VECTOR_TABLES, SchemaQueries
from memoryd.store.search import SearchQueries
from memoryd.store.stats import StatsQueries
from memoryd.store.status import StatusQueries
from memoryd.store.transcripts import TranscriptQueries
from memoryd.store.transfer import TransferQueries
from memoryd.store.views import ViewQueries


class Store(
    SchemaQueries,
    CodeQueries,
    CodeGraphQueries,
    TranscriptQueries,
    SearchQueries,
    ViewQueries,
    RecallQueries,
    ActionQueries,
    NoteQueries,
    AnchorQueries,
    ForgetQueries,
    MaintenanceQueries,
    PrivacyQueries,
    TransferQueries,
    RewriteQueries,
    RederiveQueries,
    CompactQueries,
    BlobQueries,
    ProgressQueries,
    StatusQueries,
    StatsQueries,
    StoreBase,
):
    """A connection to the memoryd database with every query memoryd runs."""


__all__ = [
    "SCHEMA_DIR",
    "VECTOR_TABLES",
    "QueryFailed",
    "Ref",
    "Store",
    "key_of",
    "now",
    "plain",
]
