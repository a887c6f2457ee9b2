"""The named exit codes of every hwadvisor command, in one place."""

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit status; listed in `--help` and docs/exit-codes.md."""

    OK = 0
    GATE_TRIPPED = 1  # a CI gate tripped (regression, refuted verdict, low bandwidth)
    USAGE = 2  # usage error or bad input
    NO_DEVICE = 3  # no driver or device where one was required
    TRIALS_FAILED = 4  # trials could not run (or none ran: validate without torch)
    INTERNAL = 70  # an internal error, a bug in hwadvisor (EX_SOFTWARE of sysexits.h)
    INTERRUPTED = 130  # Ctrl-C: the shell's code for SIGINT (128 + 2)
    BROKEN_PIPE = 141  # stdout closed early (`| head`): the shell's code for SIGPIPE (128 + 13)
    TERMINATED = 143  # SIGTERM (a CI runner's timeout): the shell's code for it (128 + 15)


EXIT_CODES_HELP = (
    "Exit codes: 0 ok, 1 a CI gate tripped, 2 usage or bad input, "
    "3 no device where one was required, 4 trials could not run, 70 internal error, "
    "130 interrupted (Ctrl-C), 141 output pipe closed, 143 terminated (SIGTERM)."
)


class UserError(Exception):
    """A problem with the user's input: reported as a message plus a hint, exit 2, no traceback."""

    def __init__(
        self, message: str, hint: str | None = None, code: ExitCode = ExitCode.USAGE
    ) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.code = code
