from qosmos.cli import main

main()
