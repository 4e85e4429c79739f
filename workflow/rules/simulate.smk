# Simulation, one job per sweep point (workload x network): the built-in closed-form
# engine, or a user's SimAI_analytical (simulator.backend: simai).


rule simulate:
    input:
        unpack(simulate_inputs),
    output:
        endtoend=L.endtoend(),
        collectives=L.collectives(),
        # Their sums and SimAI's summary line: all the summary rule reads of a simulation.
        times=L.times(),
        status=L.point_status("simulate"),
    params:
        provenance=provenance("simulator.root", "simulator.ratio_dir"),
        args=simulate_args,
        attempt=attempt(L.point_status("simulate")),
    log:
        L.log("simulate", "{point}"),
    benchmark:
        L.benchmark("simulate", "{point}")
    resources:
        mem_mb=lambda wc: max(4096 if config["simulator"]["backend"] == "simai" else 0, job_memory_mb(wc)),
        runtime=lambda wc: 120 if config["simulator"]["backend"] == "simai" else 5,
    threads: 1
    shell:
        guarded("simulate -w {input.workload} {params.args} --endtoend {output.endtoend} --collectives {output.collectives}"
                " --times {output.times}")
