#!/usr/bin/env python
import sys


def main() -> None:
    from backoffice.startup import settings_or_exit

    settings_or_exit()
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)


if __name__ == "__main__":
    main()
