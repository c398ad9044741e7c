"""What a store finds when it opens: the segments earlier runs (or other processes) left."""

from __future__ import annotations

import logging

import pyarrow as pa

from cache_store import codec
from cache_store.files import SegmentFiles
from cache_store.index import IndexEntry
from cache_store.segment import SegmentError

logger = logging.getLogger(__name__)

CORRUPT = (
    codec.CorruptSegmentError,
    SegmentError,
    pa.ArrowException,
    ValueError,
    KeyError,
    IndexError,
    TypeError,
    OverflowError,
)  # I/O errors (OSError) are not corruption: the file may read fine later


def scan(files: SegmentFiles, namespace: str) -> tuple[list[IndexEntry], int]:
    """Index entries of the intact segments, oldest first (footers and page hashes read
    only), and how many corrupt files were quarantined."""
    found, corrupt = [], 0
    for listed in files.listing():
        try:
            with files.open(listed.key) as f:
                header = codec.read_header(f)
            if header.key != listed.key or header.namespace != namespace:
                raise codec.CorruptSegmentError("segment does not match its file name")
        except FileNotFoundError:
            continue
        except CORRUPT as e:
            logger.info("quarantining corrupt KV segment %s: %s", listed.key, e)
            corrupt += 1
            files.quarantine(listed.key)
            continue
        except OSError as e:  # unreadable now, perhaps not later: leave it in place
            logger.debug("skipping unreadable KV segment %s: %s", listed.key, e)
            continue
        found.append(IndexEntry(listed.key, header.tenant, header.page_hashes, listed.size))
    return found, corrupt
