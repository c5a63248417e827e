package io.sparkhtap;

import java.util.function.Function;

import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.datasources.v2.DataSourceV2Relation;

import scala.Function1;
import scala.jdk.javaapi.CollectionConverters;
import scala.runtime.AbstractPartialFunction;

/**
 * What the shim's optimizer rules over HTAP tables share (CountOfConstant,
 * UntranslatablePredicates): whether a plan reads an HTAP table at all (the rules leave every
 * other plan alone), and a bottom-up rewrite of the plan's nodes of one type from Java, without
 * each rule spelling out Scala's partial function.
 */
final class PlanRules {
  private PlanRules() {}

  static boolean readsHtap(LogicalPlan plan) {
    for (LogicalPlan leaf : CollectionConverters.asJava(plan.collectLeaves())) {
      if (leaf instanceof DataSourceV2Relation && ((DataSourceV2Relation) leaf).table() instanceof HtapTable) return true;
    }
    return false;
  }

  /** `plan` with each node of `type`, bottom up, replaced by `rewrite`'s answer (null: kept). */
  static <T extends LogicalPlan> LogicalPlan transformUp(LogicalPlan plan, Class<T> type, Function<T, LogicalPlan> rewrite) {
    return plan.transformUp(new AbstractPartialFunction<LogicalPlan, LogicalPlan>() {
      @Override
      public boolean isDefinedAt(LogicalPlan p) {
        return type.isInstance(p);
      }

      @Override
      public <A1 extends LogicalPlan, B1> B1 applyOrElse(A1 p, Function1<A1, B1> otherwise) {
        LogicalPlan out = type.isInstance(p) ? rewrite.apply(type.cast(p)) : null;
        if (out == null) return otherwise.apply(p);
        @SuppressWarnings("unchecked")
        B1 typed = (B1) out;
        return typed;
      }
    });
  }
}
