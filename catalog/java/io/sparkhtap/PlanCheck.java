package io.sparkhtap;

import java.util.Collections;
import java.util.LinkedHashMap;
import java.util.Map;

import com.fasterxml.jackson.databind.JsonNode;

import org.apache.spark.sql.internal.SQLConf;

/**
 * A pushed plan checked before Spark relies on it: the driver's bridge parses it, renders it for
 * the replica and for the source, and runs the replica's SQL over empty tables
 * (htap.pushdown.plan_check). A plan that fails is not pushed — that part of the query stays in
 * Spark (a {@link Fallbacks} entry) — instead of failing in a task, where Spark could no longer
 * run it itself. Answers are kept per plan shape ({@link #shape}): a query planned again (EXPLAIN
 * then collect, a dashboard's every refresh) asks once.
 *
 * <p>{@value #INJECT_CONF} (tests only) makes a stage fail on purpose: {@code translate} (the
 * translators throw), {@code render} (the check answers a rendering failure).
 */
final class PlanCheck {
  static final String INJECT_CONF = "spark.htap.test.failPushdown";
  private static final Map<String, String> ANSWERS = Collections.synchronizedMap(new LinkedHashMap<String, String>() {
    @Override
    protected boolean removeEldestEntry(Map.Entry<String, String> eldest) {
      return size() > 2_000;
    }
  });
  private static final String OK = "";

  private PlanCheck() {}

  /** Why {@code plan} (a pushed plan's JSON over the catalog's source) must not be pushed, or null. */
  static String why(Map<String, String> options, String plan) {
    String inject = injected();
    String key = options.get("config") + "\n" + options.get("source") + "\n" + inject + "\n" + shape(plan);
    String known = ANSWERS.get(key);
    if (known != null) return known.equals(OK) ? null : known;
    JsonNode answer;
    try {
      answer = inject == null ? Bridge.call(options, "check-plan", plan)
          : Bridge.call(options, "check-plan", plan, "--inject", inject);
    } catch (RuntimeException e) {
      return "the pushed plan could not be checked: " + e.getMessage();  // not kept: may work next time
    }
    String why = answer.path("why").isTextual() ? answer.get("why").asText() : null;
    ANSWERS.put(key, why == null ? OK : why);
    return why;
  }

  private static final java.util.regex.Pattern EXPRESSION_ID_NAME = java.util.regex.Pattern.compile("\"c(\\d+)\"");

  /**
   * The plan with the names the translator takes from Spark's expression ids (`c123`, fresh
   * each time a query is planned) numbered by first appearance, in its root only (the table
   * reads name table columns): the same query planned again has the same shape, and its check
   * is answered from the kept answers. A consistent renaming changes neither how a plan renders
   * nor whether it binds.
   */
  static String shape(String plan) {
    int root = plan.indexOf("\"root\":");
    if (root < 0) return plan;
    Map<String, String> numbers = new java.util.HashMap<>();
    java.util.regex.Matcher m = EXPRESSION_ID_NAME.matcher(plan.substring(root));
    StringBuilder out = new StringBuilder(plan.substring(0, root));
    while (m.find()) {
      String n = numbers.computeIfAbsent(m.group(1), k -> Integer.toString(numbers.size() + 1));
      m.appendReplacement(out, "\"c" + n + "\"");
    }
    m.appendTail(out);
    return out.toString();
  }

  /** The stage a test asks to fail ({@value #INJECT_CONF}), or null. */
  static String injected() {
    String v = SQLConf.get().getConfString(INJECT_CONF, "").trim().toLowerCase(java.util.Locale.ROOT);
    return v.isEmpty() ? null : v;
  }

  /** Throws when a test asks the translators to fail ({@value #INJECT_CONF}=translate). */
  static void injectTranslationFailure() {
    if ("translate".equals(injected())) {
      throw new IllegalStateException("a translation failure injected by the test conf " + INJECT_CONF + "=translate");
    }
  }
}
