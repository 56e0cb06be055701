// The Restate side of benchmarks/compare_restate.sh: the same two flows as
// durin's bench.noop and bench.ten-steps (durin steps vs Restate ctx.run).
if (typeof Promise.withResolvers !== "function") {
  // Node 20 lacks it; the Restate SDK needs it.
  Promise.withResolvers = function () {
    let resolve;
    let reject;
    const promise = new Promise((res, rej) => {
      resolve = res;
      reject = rej;
    });
    return { promise, resolve, reject };
  };
}
const restate = require("@restatedev/restate-sdk");

const bench = restate.service({
  name: "Bench",
  handlers: {
    noop: async (ctx, input) => input,
    tenSteps: async (ctx, input) => {
      let total = 0;
      for (let i = 0; i < 10; i++) {
        total += await ctx.run("step-" + i, async () => i);
      }
      return { total, input };
    },
  },
});

restate.endpoint().bind(bench).listen(Number(process.env.PORT || 9080));
