"""`python -m hwadvisor`."""

from hwadvisor.cli import main

if __name__ == "__main__":
    main()
