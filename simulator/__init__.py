"""qosmos component: the trace-driven simulator (loaders, engine, metrics, reports, plots).

Entry points: ``traces.load_trace``, ``engine.simulate`` / ``engine.SimConfig``,
``metrics.summarize``, ``outputs.write_all``, ``gym_env.SchedulingEnv``; CLI ``qosmos simulate``.
"""
