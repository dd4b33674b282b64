"""A pipeline stage that really dies: the pipe-crash-* checks of scripts/ddp_check.py.

One process per stage of a GPipe pipeline, in one gloo group (rank_death.py's groups, store
and fork server). In the crash step, stage rank_death.VICTIM (1: a middle stage, with a
neighbour on each side) forwards the first KILL_AT micro-batches, waits until the next stage
has received and forwarded them too, and is killed (SIGKILL) as its forward pass of
micro-batch KILL_AT starts. The survivors learn of it from the pipeline's
point-to-point messages: the stages next to it see their connection to it close, the others
see their neighbours' connections close as those tear their groups down. A pipeline stage holds
blocks no other process holds, so there is no replica to continue from: every survivor
destroys its group, joins a new one of all the stages with a new process for the dead one, and
every stage reloads the newest checkpoint (the step before's) and redoes the step, which is
what resilab does under each strategy (docs/faults.md). The BatchNorm statistics the
survivors updated in the dead step's forward passes go with the reload.

A check whose plan says `"keep": true` is the negative control: its survivors skip the reload
(only the new process loads the checkpoint), so the dead step's BatchNorm updates stay, and the
comparison with resilab must fail.
"""

import os
import signal
import time

import torch

import ddp_check as dc
import rank_death as rd

KILL_AT = 2  # the micro-batch whose forward pass it does not start


class Stage(rd.Rank):
    """One stage's part of the pipeline crash checks."""

    def count_forwards(self, module, key):
        """Adds one to `key` in the store after each of `module`'s forward passes; returns the
        hook's handle."""
        def after_forward(*_):
            self.store.add(key, 1)  # and None: the output stays the module's

        return module.register_forward_hook(after_forward)

    def arm(self, i, module):
        """The victim's fate: killed as its forward pass of micro-batch KILL_AT starts, once the
        next stage has forwarded the micro-batches before it."""
        started = [0]

        def before_forward(*_):
            if started[0] == KILL_AT:
                while int(self.store.add(f"c{i}/fwd/{rd.VICTIM + 1}", 0)) < KILL_AT:
                    time.sleep(0.001)
                self.store.set(f"c{i}/death", repr(time.time()))
                os.kill(os.getpid(), signal.SIGKILL)
            started[0] += 1

        module.register_forward_pre_hook(before_forward)

    def crash_step(self, c, i, model, module, opt, schedule):
        """The crash step until the pipeline breaks, then the restart: a new group with a new
        process for the dead stage, the checkpoint reloaded (unless the check keeps the dead
        step's state) and a new schedule over the new group."""
        step, everyone = dc.CRASH_STEP, list(range(self.world))
        if self.rank == rd.VICTIM:
            self.arm(i, module)
        counter = self.count_forwards(module, f"c{i}/fwd/{self.rank}")
        try:
            dc.pipe_step(c, step, self.rank, self.world, schedule, self.images, self.labels)
        except RuntimeError as e:
            failed, error = time.time(), rd.first_line(e)
        else:
            raise SystemExit(f"{c['name']}: stage {self.rank} finished the step stage {rd.VICTIM} died in")
        counter.remove()
        opt.zero_grad(set_to_none=True)
        self.join(f"c{i}/restart", everyone)
        rebuilt = time.time()
        if not c.get("keep"):
            dc.load_state(model, opt, dc.state_dir(c, step - 1) / f"worker-{self.rank}.h5")
        self.store.set(f"c{i}/survivor/{self.rank}", f"{failed!r},{rebuilt!r},{error}")
        return dc.pipeline_schedule(c, self.rank, self.world, model, module)

    def run_check(self, i, entry):
        """Check `i` from `entry`: "start" (its first step) or "restart" (the new process for
        the dead stage, from the crash step, with the checkpoint before it)."""
        c, everyone = self.plan["checks"][i], list(range(self.world))
        model = dc.make_model()
        module = dc.Blocks(model, c["stages"][self.rank])
        opt = torch.optim.SGD(module.parameters(), lr=dc.LR, momentum=dc.MOMENTUM, weight_decay=dc.WEIGHT_DECAY)
        group, first = {"start": (f"c{i}/all", c["first"]), "restart": (f"c{i}/restart", dc.CRASH_STEP)}[entry]
        self.join(group, everyone)
        schedule = dc.pipeline_schedule(c, self.rank, self.world, model, module)
        for step in range(first, c["steps"] + 1):
            dc.load_state(model, opt, dc.state_dir(c, step - 1) / f"worker-{self.rank}.h5")
            if step == dc.CRASH_STEP and entry == "start":
                schedule = self.crash_step(c, i, model, module, opt, schedule)
            dc.pipe_step(c, step, self.rank, self.world, schedule, self.images, self.labels)
            opt.step()
            opt.zero_grad(set_to_none=True)
            dc.save_stage(c, step, self.rank, model, opt)
        self.leave()


def stage_main(rank, world, plan, port, at):
    """One stage's process: the checks from `at` = (check index, entry) on."""
    rd.process_main(Stage, rank, world, plan, port, at)


def run(world, plans, data):
    """The pipeline crash checks `plans` in one job of `world` stages: what the survivors of
    each death saw (rank_death.run's facts)."""
    return rd.run(world, plans, data, stage_main)
