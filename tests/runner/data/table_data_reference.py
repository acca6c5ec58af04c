"""Writes the same records as JSON Lines, Parquet (pyarrow), an Arrow IPC
file and stream, and a datasets save_to_disk folder, for table_data_test.cpp;
plus tables with bad rows. Usage: table_data_reference.py OUT_DIR"""

import json
import os
import sys

import datasets
import pyarrow as pa
import pyarrow.ipc as ipc
import pyarrow.parquet as pq

out = sys.argv[1]
os.makedirs(out, exist_ok=True)
datasets.disable_progress_bars()


def write_jsonl(name, rows):
    with open(os.path.join(out, name + ".jsonl"), "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


def write_all(name, rows, table=None):
    """The rows as JSONL, Parquet in small row groups, Arrow file and
    stream, and save_to_disk in two shards."""
    write_jsonl(name, rows)
    table = table if table is not None else pa.Table.from_pylist(rows)
    pq.write_table(table, os.path.join(out, name + ".parquet"), row_group_size=4)
    with ipc.new_file(os.path.join(out, name + ".arrow"), table.schema) as w:
        for batch in table.to_batches(max_chunksize=5):
            w.write_batch(batch)
    with ipc.new_stream(os.path.join(out, name + "_stream.arrow"), table.schema) as w:
        for batch in table.to_batches(max_chunksize=3):
            w.write_batch(batch)
    datasets.Dataset(table).save_to_disk(os.path.join(out, name + "_ds"), num_shards=2)


# Plain text with other columns of many types beside it (read, not used),
# Unicode, escapes, an empty document and one with control characters.
texts = ["the tailor mends a coat", "ünïcödé — 日本語 🧵", 'quotes " and \\ backslashes', "", "tab\there\nnewline",
         "a longer document " * 20, "x", "the miller counts apples"] * 3
text_rows = [{"text": t, "id": i, "score": i / 7, "ok": i % 2 == 0, "tags": ["a", "b"][: i % 3],
              "meta": {"source": "s%d" % (i % 2), "n": i}, "missing": None} for i, t in enumerate(texts)]
write_all("text", text_rows)

# Prompt/completion with large_string and dictionary-encoded columns.
pc_rows = [{"prompt": "Q%d: what is %d + %d? " % (i, i, i), "completion": "%d." % (2 * i)} for i in range(23)]
pc = pa.table({
    "prompt": pa.array([r["prompt"] for r in pc_rows], type=pa.large_string()),
    "completion": pa.array([r["completion"] for r in pc_rows]).dictionary_encode(),
})
write_all("pc", pc_rows, pc)

# Conversations (OpenAI messages): a list<struct<role, content>> column.
chats = []
for i in range(17):
    messages = [{"role": "system", "content": "You are terse."}] if i % 3 == 0 else []
    for t in range(1 + i % 3):
        messages.append({"role": "user", "content": "question %d.%d" % (i, t)})
        messages.append({"role": "assistant", "content": "answer %d.%d ✓" % (i, t)})
    chats.append({"messages": messages})
write_all("chat", chats)

# Preference pairs as strings.
pairs = [{"prompt": "Say %d. " % i, "chosen": "%d" % i, "rejected": "%d!" % (i + 1)} for i in range(13)]
write_all("pref", pairs)

# Bad tables: a column missing, a string that is not UTF-8, a DatasetDict.
pq.write_table(pa.table({"body": ["a", "b"]}), os.path.join(out, "no_text_column.parquet"))
offsets = pa.py_buffer(bytes([0, 0, 0, 0, 2, 0, 0, 0, 4, 0, 0, 0]))
data = pa.py_buffer(b"ok\xff\xfe")
not_utf8 = pa.Array.from_buffers(pa.string(), 2, [None, offsets, data])
pq.write_table(pa.table({"text": not_utf8}), os.path.join(out, "not_utf8.parquet"))
datasets.DatasetDict({
    "train": datasets.Dataset.from_dict({"text": ["x"]}),
    "test": datasets.Dataset.from_dict({"text": ["y"]}),
}).save_to_disk(os.path.join(out, "dict_ds"))
# Rows 0-4 fine, row 5 without a text (null), in the second row group.
pq.write_table(pa.table({"text": ["a", "b", "c", "d", "e", None, "g"]}), os.path.join(out, "null_row.parquet"),
               row_group_size=4)
