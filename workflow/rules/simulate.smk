# Simulation, one job per sweep point (workload x network): the built-in closed-form
# engine, or a user's SimAI_analytical (simulator.backend: simai).


rule simulate:
    input:
        unpack(simulate_inputs),
    output:
        endtoend=f"{RESULTS}/points/{{point}}/EndToEnd.csv",
        collectives=f"{RESULTS}/points/{{point}}/collectives.csv",
        # Their sums and SimAI's summary line: all the summary rule reads of a simulation.
        times=f"{RESULTS}/points/{{point}}/times.csv",
        status=f"{RESULTS}/points/{{point}}/simulate.status",
    params:
        args=simulate_args,
        attempt=attempt(f"{RESULTS}/points/{{point}}/simulate.status"),
    log:
        f"{RESULTS}/logs/simulate/{{point}}.log",
    benchmark:
        f"{RESULTS}/benchmarks/simulate/{{point}}.tsv"
    resources:
        mem_mb=lambda wc: 4096 if config["simulator"]["backend"] == "simai" else 512,
        runtime=lambda wc: 120 if config["simulator"]["backend"] == "simai" else 5,
    threads: 1
    shell:
        guarded("simulate -w {input.workload} {params.args} --endtoend {output.endtoend} --collectives {output.collectives}"
                " --times {output.times}")
