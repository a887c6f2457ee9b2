"""`python -m hwadvisor`."""

from hwadvisor.entry import main

if __name__ == "__main__":
    main()
