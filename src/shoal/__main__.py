from shoal.entry import main

main()
