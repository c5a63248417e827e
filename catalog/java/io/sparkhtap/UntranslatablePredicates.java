package io.sparkhtap;

import java.util.ArrayList;
import java.util.List;

import org.apache.spark.sql.catalyst.expressions.And;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.KnownNullable;
import org.apache.spark.sql.catalyst.plans.logical.Filter;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.catalyst.util.V2ExpressionBuilder;
import org.apache.spark.sql.connector.expressions.filter.Predicate;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;
import org.apache.spark.sql.internal.SQLConf;
import org.apache.spark.sql.types.BooleanType;
import org.apache.spark.sql.types.StructType;

import scala.Option;

/**
 * A filter conjunct that Spark's own translation to a data source predicate fails on stays in
 * Spark instead of failing the query. Spark 4.3's V2ExpressionBuilder asserts that both sides of
 * an AND it meets inside an expression are predicates, and a plain filter such as
 * {@code n2 < NULLIF(19.75, n2)} breaks that assertion (fuzz seed 25 query 897): before a scan
 * of any DSv2 source sees the filter, V2ScanRelationPushDown fails the query with
 * "assertion failed", where Spark over Parquet (no V2 translation) answers. So, over HTAP tables
 * only and before the pushdown rules run (an operator optimization rule), each conjunct of a
 * filter is translated as Spark will translate it, and one that throws is wrapped in
 * {@link KnownNullable}: it evaluates to its child's value (the tag only widens nullability, and
 * no rule removes it), and Spark's translation does not know it, so it is left in Spark.
 *
 * <p>Likewise, over one HTAP scan, a conjunct that can raise (ANSI overflow: {@code -si5 > 0})
 * is left in Spark when another conjunct of the same filter is: a pushed conjunct runs in the
 * scan, on rows the conjunct Spark keeps (an ILIKE, say) would drop first, and raises where
 * Spark alone answers (fuzz seed 39, {@code WHERE id ILIKE '%ss%' AND -si5 > 0} over a row with
 * si5 = -32768: Postgres raised "smallint out of range" on failover). What cannot raise is
 * still pushed ({@link PlanTranslator#neverRaise}).
 */
public final class UntranslatablePredicates extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!PlanRules.readsHtap(plan)) return plan;
    return PlanRules.transformUp(plan, Filter.class, UntranslatablePredicates::guarded);
  }

  /**
   * The filter with each conjunct Spark's translation fails on wrapped (and, over one HTAP
   * scan that will not take every conjunct, each that can raise), or null if none is.
   */
  private static LogicalPlan guarded(Filter filter) {
    List<Expression> all = scala.jdk.javaapi.CollectionConverters.asJava(splitConjunctivePredicates(filter.condition()));
    StructType scanned = filter.child() instanceof DataSourceV2Relation
        && ((DataSourceV2Relation) filter.child()).table() instanceof HtapTable ? filter.child().schema() : null;
    boolean someStay = false;
    if (scanned != null) {
      for (Expression c : all) someStay |= !pushed(c, scanned);
    }
    List<Expression> conjuncts = new ArrayList<>();
    boolean changed = false;
    for (Expression c : all) {
      if (translationFails(c) || someStay && !PlanTranslator.neverRaise(List.of(c)) && pushed(c, scanned)) {
        conjuncts.add(new KnownNullable(c));
        changed = true;
      } else {
        conjuncts.add(c);
      }
    }
    if (!changed) return null;
    Expression condition = conjuncts.get(0);
    for (int i = 1; i < conjuncts.size(); i++) {
      condition = new And(condition, conjuncts.get(i));
    }
    return new Filter(condition, filter.child());
  }

  /** Whether an HTAP scan of these columns takes this conjunct (HtapScanBuilder.pushPredicate's translation). */
  private static boolean pushed(Expression conjunct, StructType columns) {
    if (translationFails(conjunct)) return false;
    Option<Predicate> v2 = new V2ExpressionBuilder(conjunct, true).buildPredicate();
    if (v2.isEmpty()) return false;
    ExprTranslator.Typed typed = ExprTranslator.translate(v2.get(), columns, SQLConf.get().ansiEnabled());
    return typed != null && typed.type instanceof BooleanType;
  }

  /** Whether Spark's translation of this predicate for a data source throws (an internal error). */
  static boolean translationFails(Expression predicate) {
    try {
      new V2ExpressionBuilder(predicate, true).buildPredicate();
      return false;
    } catch (AssertionError | RuntimeException e) {
      return true;
    }
  }

  private static scala.collection.immutable.Seq<Expression> splitConjunctivePredicates(Expression e) {
    if (e instanceof And) {
      And and = (And) e;
      List<Expression> out = new ArrayList<>(scala.jdk.javaapi.CollectionConverters.asJava(splitConjunctivePredicates(and.left())));
      out.addAll(scala.jdk.javaapi.CollectionConverters.asJava(splitConjunctivePredicates(and.right())));
      return scala.jdk.javaapi.CollectionConverters.asScala(out).toList();
    }
    return scala.jdk.javaapi.CollectionConverters.asScala(List.of(e)).toList();
  }
}
