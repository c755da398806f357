"""``dpcalc fl``: DP-FedAvg at the client level — ε of a federated run, or the noise multiplier it
needs (issue 28). The mathematics is in :mod:`dpcalc.accounting.federated` and the DP-SGD
accountants; this command speaks the FL vocabulary (clients per round, total clients, rounds,
adaptive clipping's count noise) and asks both questions in one place."""

from __future__ import annotations

import click

from dpcalc.cli.epsilon import accounting_columns, accounting_notes, require_usable
from dpcalc.cli.options import (
    RANGES,
    StrictCommand,
    accountant_option,
    accountant_settings,
    delta_option,
    example_epilog,
    json_option,
    noise_multiplier_option,
    number_option,
    pld_options,
)
from dpcalc.cli.render import add_sources, emit, fmt


@click.command("fl", cls=StrictCommand, epilog=example_epilog(
    "dpcalc fl --clients-per-round 100 --total-clients 1000000 --rounds 2000 --eps 8 --delta 1e-6",
    "dpcalc fl --clients-per-round 100 --total-clients 1000000 --rounds 2000 --sigma 1 --delta 1e-6",
))
@number_option("--clients-per-round", kind=RANGES["batch_size"], required=True,
               help="m: clients per round (expected, with Poisson client sampling).")
@number_option("--total-clients", kind=RANGES["dataset_size"], required=True, help="N: clients in the population.")
@number_option("--rounds", kind=RANGES["rounds"], required=True, help="R: training rounds.")
@click.option("--client-sampling", type=click.Choice(["poisson", "fixed"]), default="poisson", show_default=True,
              help="poisson: each client joins a round with probability q = m/N; fixed: exactly m of the N clients, "
                   "uniformly without replacement.")
@noise_multiplier_option(default=None,
               help="z: noise std on the sum of clipped client updates over the clipping norm C (give --sigma for ε, "
                    "--eps for z).")
@number_option("--eps", "--epsilon", "epsilon", kind=RANGES["epsilon_target"], default=None,
               help="Target ε: calibrate the noise multiplier instead.")
@delta_option
@number_option("--count-stddev", kind=RANGES["noise_multiplier"], default=None,
               help="σ_b: std of the noise on the clipped-count query of adaptive clipping (Andrew et al. 2021), "
                    "in count units; accounted with the update noise as one Gaussian of effective multiplier "
                    "(z⁻² + (2σ_b)⁻²)^(-1/2).")
@accountant_option(default=None, extra=("all",),
                   help="Accountant (default: the tightest certified one with a proof for the client sampler).")
@pld_options
@json_option
def fl_command(clients_per_round, total_clients, rounds, client_sampling, noise_multiplier, epsilon, delta,
               count_stddev, accountant, discretization, accuracy, json_output):
    """DP-FedAvg (user-level DP): ε of a federated run, or the noise it needs.

    Each round samples clients, each sends one update clipped to norm C (the mean of its
    records' clipped gradients, or their sum clipped again to C: adding or removing a client
    moves the sum by ≤ C), and N(0, z²C²) is added to the sum (McMahan et al. 2018). This is
    DP-SGD with clients in place of records: q = m/N, T = R.
    """
    from dpcalc.accounting.federated import (
        ADAPTIVE_CLIPPING_SOURCE,
        DP_FEDAVG_SOURCE,
        federated_accounting,
    )

    answer = federated_accounting(
        clients_per_round=clients_per_round, total_clients=total_clients, rounds=rounds,
        client_sampling=client_sampling, delta=delta, noise_multiplier=noise_multiplier, target_epsilon=epsilon,
        count_stddev=count_stddev, accountant=accountant,
        options=accountant_settings(discretization=discretization, accuracy=accuracy))
    schedule, results = answer.schedule, answer.results
    inputs = {"clients_per_round": clients_per_round, "total_clients": total_clients, "rounds": rounds,
              "client_sampling": client_sampling, "sample_rate": schedule.sample_rate, "delta": delta,
              "privacy_unit": "user", "neighboring": "add-remove"}
    notes = [f"Clients sampled {'by Poisson sampling' if client_sampling == 'poisson' else 'as a fixed-size set'} "
             f"at q = m/N = {schedule.sample_rate:.4g}, R = {rounds:,} rounds; the privacy unit is the client (user): "
             "adding or removing one client's whole data (DP-FedAvg, McMahan et al. 2018)."]
    if noise_multiplier is not None:
        inputs["noise_multiplier"] = noise_multiplier
        require_usable(results, "epsilon", "ε")
        columns = accounting_columns("epsilon", "ε (upper bound)", "epsilon_lower")
        title = "ε of the federated run (per client)"
    else:
        inputs["epsilon"] = epsilon
        require_usable(results, "noise_multiplier", "σ")
        columns = accounting_columns("noise_multiplier", "", "")
        title = "noise multiplier for the target (per client)"
    extra: dict = {}
    if count_stddev is not None:
        inputs["count_stddev"] = count_stddev
        rows = answer.adaptive_clipping
        extra["adaptive_clipping"] = rows[0] if len(rows) == 1 else rows
        for row in rows:
            who = f" ({row['accountant']})" if len(rows) > 1 else ""
            z, zd = row["effective_noise_multiplier"], row["update_noise_multiplier"]
            if zd is None:
                notes.append(f"Adaptive clipping{who}: {row['reason']}.")
            elif noise_multiplier is not None:
                notes.append(f"Adaptive clipping{who}: update noise z_Δ = {zd:g} and count noise σ_b = "
                             f"{count_stddev:g} act as one Gaussian of effective multiplier z = {fmt(z, 7, 'down')} "
                             f"(Andrew et al. 2021); the table is at z.")
            else:
                notes.append(f"Adaptive clipping{who}: the effective multiplier above is z; with count noise σ_b = "
                             f"{count_stddev:g} the update sum needs z_Δ = {fmt(zd, 7, 'up')} "
                             "(z_Δ = (z⁻² − (2σ_b)⁻²)^(-1/2), Andrew et al. 2021).")
    notes += accounting_notes(schedule, results, "add-remove")[1:]
    ours = f"{DP_FEDAVG_SOURCE}" + (f"; {ADAPTIVE_CLIPPING_SOURCE}" if count_stddev else "")
    add_sources(notes, ours)
    emit(command="fl", inputs=inputs, results=[r.to_json() for r in results], json_output=json_output,
         columns=columns, title=title, notes=notes, extra=extra or None)
