"""Which state schema changes Spark's own transformWithStateInPandas accepts, run rather than
read: for each case a streaming query (Spark's RocksDB state store, one shuffle partition)
writes state with one schema, stops, and restarts on the same checkpoint with a processor
declaring another; the line printed is what the restarted processor read for the old entry,
or Spark's error class. Beside it, what stateengine does with the same change
(stateengine.evolution.describe). docs/concepts/schema-evolution.md's table comes from this.

    SPARK_LOCAL_IP=127.0.0.1 python scripts/spark_evolution_rules.py [--encoding avro|unsaferow]
        [case ...]

Each case takes about a minute (two streaming queries); pyspark >= 4.0.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import sys
import tempfile
import uuid
from decimal import Decimal

CASES = {
    "add nullable field": ("value", "a int", (1,), "a int, b string", (2, "x")),
    "add NOT NULL field": ("value", "a int", (1,), "a int, b string NOT NULL", (2, "x")),
    "remove field": ("value", "a int, b string", (1, "x"), "a int", (2,)),
    "reorder": ("value", "a int, b string", (1, "x"), "b string, a int", ("y", 2)),
    "rename": ("value", "a int, b string", (1, "x"), "a int, c string", (2, "y")),
    "int->long": ("value", "a int", (1,), "a long", (2,)),
    "long->int": ("value", "a long", (1,), "a int", (2,)),
    "int->double": ("value", "a int", (1,), "a double", (2.0,)),
    "long->double": ("value", "a long", (1,), "a double", (2.0,)),
    "float->double": ("value", "a float", (1.5,), "a double", (2.0,)),
    "int->float": ("value", "a int", (1,), "a float", (2.0,)),
    "long->float": ("value", "a long", (1,), "a float", (2.0,)),
    "short->int": ("value", "a short", (1,), "a int", (2,)),
    "decimal(5,2)->decimal(7,2)": ("value", "a decimal(5,2)", (Decimal("1.25"),),
                                   "a decimal(7,2)", (Decimal("2.50"),)),
    "string->int": ("value", "a string", ("x",), "a int", (2,)),
    "string->binary": ("value", "a string", ("x",), "a binary", (b"y",)),
    "binary->string": ("value", "a binary", (b"x",), "a string", ("y",)),
    "nested add field": ("value", "a int, s struct<x int>", (1, (1,)),
                         "a int, s struct<x int, y string>", (2, (2, "y"))),
    "array element int->long": ("value", "a array<int>", ([1, 2],), "a array<long>", ([3],)),
    "map value int->long": ("value", "a map<string,int>", ({"k": 1},), "a map<string,long>",
                            ({"k": 2},)),
    "list element add field": ("list", "a int", (1,), "a int, b string", (2, "x")),
    "map value add field": ("map", "a int", (1,), "a int, b string", (2, "x")),
    "map user key int->long": ("map", "a int", (1,), "a int", (2,)),
    # the same state, grouped by a column of another type (the query's key schema)
    "grouping key string->bigint": ("value", "a int", (1,), "a int", (2,)),
}
GROUPING = {"grouping key string->bigint": ("string", "bigint")}


def processor(kind: str, schema: str, value: tuple, key_schema: str | None, key: tuple):
    import pandas as pd
    from pyspark.sql.streaming import StatefulProcessor

    class Probe(StatefulProcessor):
        def init(self, handle):
            if kind == "value":
                self.s = handle.getValueState("s", schema)
            elif kind == "list":
                self.s = handle.getListState("s", schema)
            else:
                self.s = handle.getMapState("s", key_schema, schema)

        def handleInputRows(self, k, rows, timerValues):
            for _ in rows:
                pass
            old = None
            if kind == "value":
                old = self.s.get() if self.s.exists() else None
                self.s.update(value)
            elif kind == "list":
                old = list(self.s.get()) if self.s.exists() else None
                self.s.appendValue(value)
            else:
                old = list(self.s.iterator()) if self.s.exists() else None
                self.s.updateValue(key, value)
            yield pd.DataFrame({"id": [k[0]], "old": [repr(old)]})

        def close(self):
            pass

    return Probe()


def run(spark, ckpt: str, src: str, proc, key_type: str = "string") -> list:
    for f in os.listdir(src):
        os.remove(os.path.join(src, f))
    with open(os.path.join(src, f"{uuid.uuid4().hex}.json"), "w") as f:  # a new file each run
        f.write(json.dumps({"id": "a" if key_type == "string" else 1}) + "\n")
    df = spark.readStream.schema(f"id {key_type}").json(src)
    out = df.groupBy("id").transformWithStateInPandas(proc, f"id {key_type}, old string",
                                                       "Update", "None")
    got: list = []
    q = (out.writeStream.foreachBatch(lambda b, _: got.extend(b.collect()))
         .option("checkpointLocation", ckpt).start())
    try:
        q.processAllAvailable()
    finally:
        q.stop()
    return got


def error_class(e: BaseException) -> str:
    msg = str(e).replace("\n", " ")
    classes = [c for c in re.findall(r"\[([A-Z_]{5,})\]", msg)
               if c not in ("STREAM_FAILED", "FOREACH_BATCH_USER_FUNCTION_ERROR")]
    if classes:
        return classes[0]
    m = re.search(r"(IncompatibleSchemaException|Unexpected type[^.]*)", msg)
    return m.group(1) if m else msg[:200]


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--encoding", choices=("avro", "unsaferow"), default="avro")
    p.add_argument("cases", nargs="*", help=f"cases (default: all): {', '.join(CASES)}")
    args = p.parse_args(argv)
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    from stateengine import evolution

    spark = (SparkSession.builder.master("local[2]").appName("spark-evolution-rules")
             .config("spark.driver.host", "127.0.0.1")
             .config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "1")
             .config("spark.sql.streaming.stateStore.providerClass",
                     "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider")
             .config("spark.sql.streaming.stateStore.encodingFormat", args.encoding)
             .getOrCreate())
    spark.sparkContext.setLogLevel("OFF")
    for name in args.cases or list(CASES):
        kind, s1, v1, s2, v2 = CASES[name]
        ks1 = ks2 = "k string"
        k1 = k2 = ("u",)
        if name == "map user key int->long":
            ks1, ks2, k1, k2 = "k int", "k long", (1,), (2,)
        report = evolution.describe(s1, s2)
        mine = ("refused: " + "; ".join(f"{w}: {why}" for w, _, _, why in report.problems)
                if report.problems else "allowed")
        if name == "map user key int->long":
            mine = "refused: map user keys never change"
        g1, g2 = GROUPING.get(name, ("string", "string"))
        if g1 != g2:
            mine = "refused: the grouping key's types never change"
        d = tempfile.mkdtemp()
        ck, src = os.path.join(d, "ck"), os.path.join(d, "src")
        os.makedirs(src)
        try:
            run(spark, ck, src, processor(kind, s1, v1, ks1, k1), g1)
        except Exception as e:  # noqa: BLE001 - the case's outcome is the report
            print(f"{name}: Spark cannot store the first schema ({error_class(e)}) | "
                  f"stateengine: {mine}", flush=True)
            continue
        try:
            got = run(spark, ck, src, processor(kind, s2, v2, ks2, k2), g2)
            spark_says = f"read {[r.old for r in got]}"
        except Exception as e:  # noqa: BLE001
            spark_says = f"refused ({error_class(e)})"
        finally:
            shutil.rmtree(d, ignore_errors=True)
        print(f"{name}: Spark {args.encoding}: {spark_says} | stateengine: {mine}", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
