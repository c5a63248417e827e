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
 */
public final class UntranslatablePredicates extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!PlanRules.readsHtap(plan)) return plan;
    return PlanRules.transformUp(plan, Filter.class, UntranslatablePredicates::guarded);
  }

  /** The filter with each conjunct Spark's translation fails on wrapped, or null if none is. */
  private static LogicalPlan guarded(Filter filter) {
    List<Expression> conjuncts = new ArrayList<>();
    boolean changed = false;
    for (Expression c : scala.jdk.javaapi.CollectionConverters.asJava(splitConjunctivePredicates(filter.condition()))) {
      if (translationFails(c)) {
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
