package io.sparkhtap;

import java.util.List;

import org.apache.spark.sql.catalyst.expressions.Coalesce;
import org.apache.spark.sql.catalyst.expressions.Expression;
import org.apache.spark.sql.catalyst.expressions.Literal;
import org.apache.spark.sql.catalyst.expressions.aggregate.AggregateExpression;
import org.apache.spark.sql.catalyst.expressions.aggregate.Average;
import org.apache.spark.sql.catalyst.expressions.aggregate.Count;
import org.apache.spark.sql.catalyst.expressions.aggregate.Max;
import org.apache.spark.sql.catalyst.plans.logical.Aggregate;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.types.DataTypes;

import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * A COUNT of a constant, written so that Spark's scan pushdown cannot take it for COUNT(*).
 * Spark translates every COUNT(literal) it offers a data source as COUNT(*)
 * (DataSourceStrategy.translateAggregate: "COUNT(any literal) is the same as COUNT(*)"), which
 * COUNT(DISTINCT 5) (1, or 0 over no rows) and COUNT(NULL) (0) are not: pushed to our scan as
 * offered, the answer would change (the fuzzer's seed 118). So, over HTAP tables only and before
 * the pushdown rules run (an operator optimization rule): COUNT(NULL), DISTINCT or not, becomes 0,
 * and COUNT(DISTINCT c) of a non-null constant COALESCE(MAX(1), 0). Both are Spark's own values;
 * a COUNT(5) without DISTINCT is COUNT(*) indeed and is left alone. An AVG of NULL becomes NULL
 * (its value, over any rows): Spark's pushdown splits an AVG it offers as partial aggregates into
 * SUM and COUNT of its argument, after this rule, and that COUNT(NULL) went out as COUNT(*) too —
 * ANSI's "overflow in sum of decimals" for a NULL sum of a non-zero count (fuzz seed 27, query 22).
 */
public final class CountOfConstant extends Rule<LogicalPlan> {
  @Override
  public LogicalPlan apply(LogicalPlan plan) {
    if (!PlanRules.readsHtap(plan)) return plan;
    return PlanRules.transformUp(plan, Aggregate.class, a -> a.transformExpressions(REWRITE));
  }

  private static final AbstractPartialFunction<Expression, Expression> REWRITE =
      new AbstractPartialFunction<Expression, Expression>() {
        @Override
        public boolean isDefinedAt(Expression e) {
          return constant(e) != null || averageOfNull(e);
        }

        @Override
        public <A1 extends Expression, B1> B1 applyOrElse(A1 e, Function1<A1, B1> otherwise) {
          if (averageOfNull(e)) {
            @SuppressWarnings("unchecked")
            B1 typed = (B1) new Literal(null, e.dataType());
            return typed;
          }
          Literal value = constant(e);
          if (value == null) return otherwise.apply(e);
          Expression out;
          if (value.value() == null) {
            out = new Literal(0L, DataTypes.LongType);
          } else {
            AggregateExpression any = new Max(new Literal(1L, DataTypes.LongType)).toAggregateExpression();
            out = new Coalesce(CollectionConverters.asScala(
                List.<Expression>of(any, new Literal(0L, DataTypes.LongType))).toList());
          }
          @SuppressWarnings("unchecked")
          B1 typed = (B1) out;
          return typed;
        }
      };

  /** An AVG (DISTINCT or not, filtered or not) of a NULL literal. */
  private static boolean averageOfNull(Expression e) {
    if (!(e instanceof AggregateExpression)) return false;
    AggregateExpression a = (AggregateExpression) e;
    return a.aggregateFunction() instanceof Average
        && ((Average) a.aggregateFunction()).child() instanceof Literal
        && ((Literal) ((Average) a.aggregateFunction()).child()).value() == null;
  }

  /** The constant of a COUNT(DISTINCT constant) or COUNT(NULL) without FILTER, else null. */
  private static Literal constant(Expression e) {
    if (!(e instanceof AggregateExpression)) return null;
    AggregateExpression a = (AggregateExpression) e;
    if (!(a.aggregateFunction() instanceof Count) || a.filter().isDefined()) return null;
    List<Expression> args = CollectionConverters.asJava(a.aggregateFunction().children());
    if (args.size() != 1 || !(args.get(0) instanceof Literal)) return null;
    Literal value = (Literal) args.get(0);
    return a.isDistinct() || value.value() == null ? value : null;
  }
}
