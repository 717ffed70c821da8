package io.stateengine.spark;

import com.fasterxml.jackson.databind.ObjectMapper;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.SparkContext;
import org.apache.spark.sql.api.java.UDF1;
import org.apache.spark.util.AccumulatorV2;
import org.apache.spark.util.LongAccumulator;

/**
 * Puts stateengine's per-partition state metrics into named accumulators, which the Spark UI
 * shows on each stage's page (and per task) and its REST API returns.
 *
 * <p>Python workers cannot create or update named accumulators, so the metrics travel as data:
 * each task of a stateful step emits one row whose {@code __se_metrics} column holds its sealed
 * metrics as JSON (stateengine/spark/metrics.py). The step's filter calls this function on those
 * rows only; it adds the figures to accumulators registered on the driver when Spark creates the
 * function (registerJavaFunction), and returns false so the row is dropped.
 *
 * <p>Counters (rows read, times, bytes uploaded) add up over tasks and batches, as Spark's own
 * task metrics do. Gauges (keys, live bytes, memory) keep the latest value per operator and
 * partition, and show their sum: the state's current size, like Spark's numRowsTotal.
 */
public final class StateMetricsUi implements UDF1<String, Boolean> {
  private static final long serialVersionUID = 1L;

  /** The JSON fields summed over tasks and batches (the names stateengine/metrics.py seals). */
  static final String[] COUNTERS = {
    "rows_read", "rows_written", "rows_deleted", "timers_fired", "load_ms", "update_ms",
    "commit_ms", "bytes_uploaded", "files_uploaded", "files_reused", "storage_retries"
  };
  /** The JSON fields whose latest value per partition counts. */
  static final String[] GAUGES = {
    "keys", "timers", "live_bytes", "files", "memory_bytes", "memtable_bytes"
  };
  static final String PREFIX = "stateengine.";

  private static final ObjectMapper JSON = new ObjectMapper();

  private final Map<String, LongAccumulator> counters = new LinkedHashMap<>();
  private final Map<String, PartitionGauge> gauges = new LinkedHashMap<>();

  /** Runs on the driver, where Spark instantiates the function: registers the accumulators. */
  public StateMetricsUi() {
    SparkContext sc = SparkContext.getOrCreate();
    for (String name : COUNTERS) {
      LongAccumulator acc = new LongAccumulator();
      sc.register(acc, PREFIX + name);
      counters.put(name, acc);
    }
    for (String name : GAUGES) {
      PartitionGauge acc = new PartitionGauge();
      sc.register(acc, PREFIX + name);
      gauges.put(name, acc);
    }
  }

  /** Records one metrics row; false, so that the filter drops it. */
  @Override
  public Boolean call(String metrics) throws Exception {
    if (metrics == null) {
      return Boolean.FALSE;
    }
    @SuppressWarnings("unchecked")
    Map<String, Object> m = JSON.readValue(metrics, Map.class);
    String where = m.get("operator") + "/" + m.get("partition");
    for (Map.Entry<String, LongAccumulator> e : counters.entrySet()) {
      Object v = m.get(e.getKey());
      if (v instanceof Number) {
        e.getValue().add(Math.round(((Number) v).doubleValue()));
      }
    }
    for (Map.Entry<String, PartitionGauge> e : gauges.entrySet()) {
      Object v = m.get(e.getKey());
      if (v instanceof Number) {
        e.getValue().add(new Object[] {where, Math.round(((Number) v).doubleValue())});
      }
    }
    return Boolean.FALSE;
  }

  /**
   * The latest value per (operator, partition), shown as their sum. A task's copy holds its own
   * partition's reading; merging on the driver replaces that partition's earlier one.
   */
  public static final class PartitionGauge extends AccumulatorV2<Object[], Long> {
    private static final long serialVersionUID = 1L;
    private HashMap<String, Long> latest = new HashMap<>();

    @Override
    public boolean isZero() {
      return latest.isEmpty();
    }

    @Override
    public PartitionGauge copy() {
      PartitionGauge c = new PartitionGauge();
      c.latest = new HashMap<>(latest);
      return c;
    }

    @Override
    public void reset() {
      latest = new HashMap<>();
    }

    @Override
    public void add(Object[] reading) {
      latest.put((String) reading[0], (Long) reading[1]);
    }

    @Override
    public void merge(AccumulatorV2<Object[], Long> other) {
      latest.putAll(((PartitionGauge) other).latest);
    }

    @Override
    public Long value() {
      long sum = 0;
      for (long v : latest.values()) {
        sum += v;
      }
      return sum;
    }
  }
}
