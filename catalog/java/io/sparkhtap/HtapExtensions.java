package io.sparkhtap;

import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.catalyst.rules.Rule;
import org.apache.spark.sql.execution.SparkStrategy;

import scala.Function1;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * {@code spark.sql.extensions = io.sparkhtap.HtapExtensions}: adds the one-snapshot-per-query
 * strategy, then whole-subtree pushdown (HtapSubtreeStrategy), and three optimizer rules: one keeps a
 * COUNT of a constant exact under scan pushdown (CountOfConstant), one leaves in Spark a filter
 * that Spark's own translation for a data source fails on (UntranslatablePredicates), one answers an
 * aggregate from a derived view of its table (ViewRewrite).
 */
public class HtapExtensions extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {
  @Override
  public BoxedUnit apply(SparkSessionExtensions extensions) {
    Function1<SparkSession, SparkStrategy> strategy = new AbstractFunction1<SparkSession, SparkStrategy>() {
      @Override
      public SparkStrategy apply(SparkSession session) {
        return new HtapSnapshotStrategy();
      }
    };
    extensions.injectPlannerStrategy(strategy);
    // After the snapshot strategy: a subtree's scan takes over its leaves' snapshot token.
    extensions.injectPlannerStrategy(new AbstractFunction1<SparkSession, SparkStrategy>() {
      @Override
      public SparkStrategy apply(SparkSession session) {
        return new HtapSubtreeStrategy();
      }
    });
    // Before the scan pushdown rules: COUNT(DISTINCT constant) and COUNT(NULL) kept exact.
    extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new CountOfConstant();
      }
    });
    // Before the scan pushdown rules too: a filter Spark's own V2 translation fails on stays in Spark.
    extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new UntranslatablePredicates();
      }
    });
    // An aggregate a derived view answers reads the view's states (and reading a view is one).
    extensions.injectOptimizerRule(new AbstractFunction1<SparkSession, Rule<LogicalPlan>>() {
      @Override
      public Rule<LogicalPlan> apply(SparkSession session) {
        return new ViewRewrite();
      }
    });
    return BoxedUnit.UNIT;
  }
}
